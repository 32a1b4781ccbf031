"""`secureml verify-pipeline`: was this pipeline YAML compiled by secureml, against which profile?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from secureml.cli.options import (
    FormatOption,
    IdentityOption,
    IdentityRegexpOption,
    IssuerOption,
    OnlineOption,
    TrustedRootOption,
)
from secureml.cli.output import emit_json, run_cli
from secureml.core.errors import InputError

if TYPE_CHECKING:
    from secureml.compile.attestation import VerifiedPipeline
    from secureml.supplychain.identity import TrustedIdentity

SCHEMA = "secureml.dev/verify-pipeline/v1"


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(
            f"cannot read {what} {path}", why=err.strerror or str(err), fix="check the path"
        ) from None


@run_cli
def verify_pipeline(
    pipeline: Annotated[
        Path,
        typer.Argument(metavar="PIPELINE", help="The compiled pipeline YAML."),
    ],
    attestation: Annotated[
        Path,
        typer.Option(
            "--attestation",
            metavar="FILE",
            help="The attestation `secureml compile --attest` wrote for it.",
        ),
    ],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            metavar="FILE",
            help="The current TenantProfile: the pipeline must have been compiled against "
            "exactly these bytes.",
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            metavar="PEM",
            help="PEM public key of a key-signed attestation (instead of identity flags).",
        ),
    ] = None,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    trusted_root: TrustedRootOption = None,
    online: OnlineOption = False,
    output: FormatOption = "text",
) -> None:
    """Verify a pipeline's compile attestation: its signature, that it covers these exact bytes,
    that every recorded rule passed and (with --profile) that it was compiled against that profile.

    Exit 0: verified. 1: not verified (the reason names what failed: signature, signer, subject digest, predicate type, profile, rules). 2: unusable flags or files, or a TUF repository that does not answer (--online).
    """
    from secureml.compile.attestation import verify_pipeline as verify

    identities: list[TrustedIdentity] = []
    if key is not None:
        if certificate_identity or certificate_identity_regexp or certificate_oidc_issuer:
            raise InputError(
                "--key and --certificate-identity[-regexp]/--certificate-oidc-issuer both given",
                why="an attestation is signed either by a key or by a certificate identity",
                fix="pass either --key or the certificate identity flags",
            )
    else:
        from secureml.cli.verify import identities_from

        identities = identities_from(
            certificate_identity,
            certificate_identity_regexp,
            certificate_oidc_issuer,
            alternative="--key",
        )
    verified = verify(
        _read(pipeline, "pipeline"),
        _read(attestation, "attestation"),
        key_pem=_read(key, "key") if key is not None else None,
        identities=identities,
        trusted_root=trusted_root or "production",
        online=online,
        current_profile=_read(profile, "profile") if profile is not None else None,
        pipeline_name=str(pipeline),
        attestation_source=str(attestation),
        key_source=str(key),
        profile_source=str(profile),
    )
    if output == "json":
        emit_json(_json(str(pipeline), str(attestation), verified))
    else:
        typer.echo(_text(str(pipeline), verified))


def _json(pipeline: str, attestation: str, verified: VerifiedPipeline) -> dict[str, Any]:
    predicate = verified.predicate
    signer: dict[str, Any] = {"signer": verified.signer}
    if verified.issuer is not None:
        signer["issuer"] = verified.issuer
    return {
        "schema": SCHEMA,
        "verified": True,
        "pipeline": pipeline,
        "digest": verified.digest,
        "attestation": attestation,
        **signer,
        "profile": {**predicate["profile"], "checked": verified.profile_checked},
        "rulesPassed": verified.rules_passed,
        "images": predicate.get("images", []),
        "compiler": predicate.get("compiler", {}),
    }


def _text(pipeline: str, verified: VerifiedPipeline) -> str:
    predicate = verified.predicate
    recorded = predicate["profile"]
    images = predicate.get("images", [])
    unverified = sum(1 for image in images if image.get("signer") == "unverified")
    compiler = predicate.get("compiler", {})
    by = f"{verified.signer} (issuer {verified.issuer})" if verified.issuer else verified.signer
    profile = (
        "matches the current profile"
        if verified.profile_checked
        else "not compared (no --profile given)"
    )
    return (
        f"verified: {pipeline} ({verified.digest}) compiled by secureml "
        f"{compiler.get('secureml', '?')} (kfp {compiler.get('kfp', '?')})\n"
        f"  signed by {by}\n"
        f"  profile {recorded.get('name')} (namespace {recorded.get('namespace')}, "
        f"sha256:{recorded.get('sha256')}): {profile}\n"
        f"  rules: {verified.rules_passed} passed; images: {len(images)} "
        f"({len(images) - unverified} signature-verified, {unverified} unverified)"
    )
