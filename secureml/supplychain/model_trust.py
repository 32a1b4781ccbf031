"""The profile's model trust as one JSON text: what the compiler writes, admission pins, the
launcher reads. Standard library only: the admission rules import it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.errors import InputError

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

PUBLIC_ROOTS = ("production", "staging")


def profile_trust_json(profile: TenantProfile) -> str:
    """The profile's `spec.models` trust ("" when it trusts no model signer). A relative
    trusted-root path is read from the working directory, as the image policy's is
    (`secureml.bundle.imagepolicy`)."""
    models = profile.spec.models
    if not models.signers and not models.keys:
        return ""
    signers = [
        {"issuer": s.issuer, "subject": s.subject}
        if s.subject is not None
        else {"issuer": s.issuer, "subjectRegExp": s.subject_reg_exp}
        for s in models.signers
    ]
    root = models.trusted_root or profile.spec.images.signatures.trusted_root
    document = {"signers": signers, "keys": list(models.keys), "trustedRoot": _root(root)}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def _root(trusted_root: str) -> Any:
    if trusted_root in PUBLIC_ROOTS:
        return trusted_root
    try:
        return json.loads(Path(trusted_root).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(
            f"the models' trusted root {trusted_root} cannot be read",
            why=str(err).splitlines()[0] if str(err) else type(err).__name__,
            fix="give spec.models.trustedRoot as production, staging or a readable trusted_root.json",
            where="spec.models.trustedRoot",
        ) from None
