"""The ValidatingAdmissionPolicy: the tenant's rule catalogue, checked by the API server.

Each rule of `secureml.rules.rules_for_profile` becomes one `validations[]` entry with the very
expression `secureml check-pod` evaluates offline; the rule id leads each message so that a
refusal names the rule. Every Pod in the tenant namespace is checked, labelled or not, on CREATE
and UPDATE (labels and annotations of a running pod can change); this runs after the mutating
policy, so it sees the pod as mutated.
"""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, cluster_name, namespace_selector, tenant_labels
from secureml.profile import TenantProfile

API_VERSION = "admissionregistration.k8s.io/v1"
REASON = "Forbidden"


def validations(profile: TenantProfile) -> list[Manifest]:
    from secureml.rules import rules_for_profile

    entries = []
    for rule in rules_for_profile(profile):
        prefix = f"{rule.id}: "
        entries.append(
            {
                "expression": rule.expression,
                "message": prefix + rule.message,
                "messageExpression": f"{_cel_string(prefix)} + ({rule.message_expression})",
                "reason": REASON,
            }
        )
    return entries


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render_policy(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": cluster_name(profile, "validate-pods"), "labels": tenant_labels(profile)},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": namespace_selector(profile),
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["pods"],
                        }
                    ],
                },
                "validations": validations(profile),
            },
        }
    ]


def render_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    name = cluster_name(profile, "validate-pods")
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": tenant_labels(profile)},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": namespace_selector(profile)},
            },
        }
    ]
