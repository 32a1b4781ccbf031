"""SPIRE's ClusterSPIFFEID: each step gets exactly the SPIFFE ID the compiler expects.

KFP cannot give a step its own service account, so the ID comes from the pod labels the compiler
sets (pipeline, step). The profile's template is translated into the controller manager's Go
template; the trust domain, namespace and tenant are written in literally, so a SPIRE server with
another trust domain refuses the entry instead of issuing an unexpected ID.
"""

from __future__ import annotations

import string

from secureml import contract
from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.errors import SecuremlError
from secureml.profile import TenantProfile


def _label(key: str) -> str:
    return f'{{{{ index .PodMeta.Labels "{key}" }}}}'


def spiffe_id_template(profile: TenantProfile) -> str:
    """The profile's `spiffeIdTemplate` as a ClusterSPIFFEID `spiffeIDTemplate`."""
    identity = profile.spec.identity
    fields = {
        "trustDomain": identity.trust_domain,
        "namespace": profile.spec.namespace,
        "tenant": profile.metadata.name,
        "pipeline": _label(contract.LABEL_PIPELINE),
        "step": _label(contract.LABEL_STEP),
    }
    parts = list(string.Formatter().parse(identity.spiffe_id_template))
    literal_text = "".join(literal for literal, _, _, _ in parts)
    if "{{" in literal_text or "}}" in literal_text:
        raise SecuremlError(
            "spiffeIdTemplate contains '{{' or '}}'",
            why="SPIRE's controller manager reads the template as a Go template",
            fix="remove the braces from the literal text of spec.identity.spiffeIdTemplate",
            where=f"profile {profile.metadata.name}",
        )
    out = []
    for literal, name, _, _ in parts:
        out.append(literal)
        if name:
            out.append(fields[name])
    return "".join(out)


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
