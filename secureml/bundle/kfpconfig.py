"""KFP's `metadata-grpc-configmap` in the tenant namespace may hold only KFP's two keys.

KFP's executor template imports this ConfigMap into every step's `main` with `envFrom` and no
prefix (kubeflow/pipelines 2.17.0 `backend/src/v2/compiler/argocompiler/common.go`,
`metadataEnvFrom`); KFP's profile controller writes it into each profile namespace with
`METADATA_GRPC_SERVICE_HOST` and `METADATA_GRPC_SERVICE_PORT`
(`manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py`). Anyone who
may write ConfigMaps in the namespace could otherwise put `LD_PRELOAD` or a shim switch into every
step's environment, where admission never sees it. `secureml.envFrom` admits exactly that import;
this policy refuses the ConfigMap, on create and update, with any other key or any `binaryData`.
"""

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
