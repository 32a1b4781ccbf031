"""SPIRE's ClusterSPIFFEID: each step gets exactly the SPIFFE ID the compiler expects."""

from __future__ import annotations

from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.profile.spiffe import spiffe_id_template


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if not profile.spec.identity.required:
        return []
    return [
        {
            "apiVersion": "spire.spiffe.io/v1alpha1",
            "kind": "ClusterSPIFFEID",
            "metadata": {"name": cluster_name(profile, "steps"), "labels": tenant_labels(profile)},
            "spec": {
                "spiffeIDTemplate": spiffe_id_template(profile),
                "namespaceSelector": namespace_selector(profile),
                "podSelector": {
                    "matchLabels": {contract.LABEL_TENANT: profile.metadata.name},
                    "matchExpressions": [
                        {"key": contract.LABEL_PIPELINE, "operator": "Exists"},
                        {"key": contract.LABEL_STEP, "operator": "Exists"},
                        # trainer nodes get their own ID under the step's (bundle/trainer.py)
                        *(
                            [{"key": contract.LABEL_TRAINER_NODE, "operator": "DoesNotExist"}]
                            if profile.spec.trainer is not None
                            else []
                        ),
                    ],
                },
            },
        }
    ]
