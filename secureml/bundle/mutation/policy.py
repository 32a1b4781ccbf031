"""The MutatingAdmissionPolicy and its binding, around the compiled JSONPatch expression."""

from __future__ import annotations

from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.bundle.mutation.jsonpatch_cel import jsonpatch_expression, label_test
from secureml.core import contract
from secureml.core.k8s_versions import at_least
from secureml.pods.mutation.model import LabelIs
from secureml.profile.model import TenantProfile


def tenant_match_condition(profile: TenantProfile) -> str:
    return label_test(LabelIs(contract.LABEL_TENANT, (profile.metadata.name,)))


def policy_api_version(options: BundleOptions) -> str:
    """MutatingAdmissionPolicy is GA (v1) from 1.36 and beta (v1beta1) in 1.34 and 1.35."""
    version = "v1" if at_least(options.k8s_version, "1.36") else "v1beta1"
    return f"admissionregistration.k8s.io/{version}"


def render_policy(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    expression = jsonpatch_expression(profile)
    if not expression:
        return []
    return [
        {
            "apiVersion": policy_api_version(options),
            "kind": "MutatingAdmissionPolicy",
            "metadata": {
                "name": cluster_name(profile, "mutate-steps"),
                "labels": tenant_labels(profile),
            },
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "namespaceSelector": namespace_selector(profile),
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                },
                "matchConditions": [
                    {"name": "secure-step-of-tenant", "expression": tenant_match_condition(profile)}
                ],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            },
        }
    ]


def render_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if not jsonpatch_expression(profile):
        return []
    name = cluster_name(profile, "mutate-steps")
    return [
        {
            "apiVersion": policy_api_version(options),
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": tenant_labels(profile)},
            "spec": {
                "policyName": name,
                "matchResources": {
                    "namespaceSelector": namespace_selector(profile),
                    "objectSelector": {
                        "matchLabels": {contract.LABEL_TENANT: profile.metadata.name}
                    },
                },
            },
        }
    ]
