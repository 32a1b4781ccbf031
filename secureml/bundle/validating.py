"""The ValidatingAdmissionPolicies: the tenant's rule catalogue, checked by the API server.

Each rule of `secureml.rules.rules_for_profile` becomes one `validations[]` entry with the very
expression `secureml check-pod` evaluates offline; the rule id leads each message so that a
refusal names the rule. Rules are grouped by their `scope` (`secureml.rules.scope`), one policy per
scope, in catalogue order:

- `validate-pods`: Pod Security restricted and the secureml rules for every pod (images,
  environment, non-root, Linux), no match condition;
- `validate-steps`: the step rules, with the scope as the policy's `matchConditions` entry, so
  KFP's own driver pods (only KFP/Argo images, no GPU) are not held to them.

Every Pod in the tenant namespace is checked, labelled or not, on CREATE and UPDATE (labels and
annotations of a running pod can change), on UPDATE of `pods/ephemeralcontainers` (an
ephemeral container added to a running pod, which can turn a KFP system pod into a step pod) and of
`pods/resize` (in-place resizing, GA in 1.35: a pod's resources change after admission). This runs
after the mutating policy, so it sees the pod as mutated.
"""

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
