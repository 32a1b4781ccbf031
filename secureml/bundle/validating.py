"""The ValidatingAdmissionPolicies: the tenant's rule catalogue, checked by the API server."""

from __future__ import annotations

from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    pod_match_constraints,
    tenant_labels,
)
from secureml.profile.model import TenantProfile
from secureml.rules.cel.text import quote

API_VERSION = "admissionregistration.k8s.io/v1"
REASON = "Forbidden"
# Policy name suffix per rule scope: every pod, and secureml step pods.
EVERY_POD_POLICY = "validate-pods"
STEP_POD_POLICY = "validate-steps"


def _policies(
    profile: TenantProfile, options: BundleOptions
) -> list[tuple[str, str, list[Manifest]]]:
    """(name suffix, scope, validations) per policy, in catalogue order; empty ones left out."""
    from secureml.rules import rules_for_profile
    from secureml.rules.request import for_server
    from secureml.rules.scope import EVERY_POD, STEP_POD

    by_scope: dict[str, list[Manifest]] = {EVERY_POD: [], STEP_POD: []}
    for rule in rules_for_profile(profile, options.k8s_version):
        if rule.scope not in by_scope:
            raise ValueError(f"rule {rule.id}: no policy renders its scope")
        prefix = f"{rule.id}: "
        by_scope[rule.scope].append(
            {
                "expression": for_server(rule.expression),
                "message": prefix + rule.message,
                "messageExpression": f"{quote(prefix)} + ({for_server(rule.message_expression)})",
                "reason": REASON,
            }
        )
    named = ((EVERY_POD_POLICY, EVERY_POD), (STEP_POD_POLICY, STEP_POD))
    return [(suffix, scope, by_scope[scope]) for suffix, scope in named if by_scope[scope]]


def render_policy(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    from secureml.rules.scope import STEP_POD_CONDITION_NAME

    policies = []
    for suffix, scope, entries in _policies(profile, options):
        spec: Manifest = {
            "failurePolicy": "Fail",
            "matchConstraints": pod_match_constraints(
                profile, ("pods", "pods/ephemeralcontainers", "pods/resize")
            ),
        }
        if scope:
            spec["matchConditions"] = [{"name": STEP_POD_CONDITION_NAME, "expression": scope}]
        spec["validations"] = entries
        policies.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {
                    "name": cluster_name(profile, suffix),
                    "labels": tenant_labels(profile),
                },
                "spec": spec,
            }
        )
    return policies


def policy_binding(profile: TenantProfile, name: str) -> Manifest:
    """The Deny binding of the tenant's ValidatingAdmissionPolicy `name`, for its namespace."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": tenant_labels(profile)},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(profile)},
        },
    }


def render_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        policy_binding(profile, cluster_name(profile, suffix))
        for suffix, _, _ in _policies(profile, options)
    ]
