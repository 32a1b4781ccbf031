"""KFP's `metadata-grpc-configmap` in the tenant namespace may hold only KFP's two keys."""

from __future__ import annotations

from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.bundle.validating import API_VERSION, policy_binding
from secureml.core import contract
from secureml.profile.model import TenantProfile

POLICY = "kfp-metadata-configmap"
KEYS = "[" + ", ".join(f"'{key}'" for key in contract.KFP_METADATA_CONFIGMAP_KEYS) + "]"
CONDITION = f"object.metadata.name == '{contract.KFP_METADATA_CONFIGMAP}'"
EXPRESSION = f"(!has(object.data) || object.data.all(k, k in {KEYS})) && !has(object.binaryData)"
MESSAGE = (
    f"secureml.kfpMetadataConfigMap: ConfigMap {contract.KFP_METADATA_CONFIGMAP} is imported into "
    f"every step's environment; it may hold only {', '.join(contract.KFP_METADATA_CONFIGMAP_KEYS)}"
)


def render_policy(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": cluster_name(profile, POLICY), "labels": tenant_labels(profile)},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": namespace_selector(profile),
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                },
                "matchConditions": [{"name": "kfp-metadata-configmap", "expression": CONDITION}],
                "validations": [
                    {"expression": EXPRESSION, "message": MESSAGE, "reason": "Forbidden"}
                ],
            },
        }
    ]


def render_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [policy_binding(profile, cluster_name(profile, POLICY))]
