"""The profile's SPIFFE ID template as SPIRE's ClusterSPIFFEID writes it (a Go template)."""

from __future__ import annotations

import string

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.profile.model import TenantProfile


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
