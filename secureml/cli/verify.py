"""`secureml verify-image` and `secureml verify-bundle` (the sigstore-conformance client protocol).

Sigstore is imported inside the commands only; the signer flags are `cli.options`'.
"""

from __future__ import annotations

import re
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
    TufRootOption,
    TufUrlOption,
)
from secureml.cli.output import emit_json, run_cli
from secureml.core.errors import InputError, SecuremlError

if TYPE_CHECKING:
    from secureml.supplychain.identity import TrustedIdentity
    from secureml.supplychain.tuf_refresh import TufRepository
    from secureml.supplychain.verifier import VerifiedSignature

SCHEMA = "secureml.dev/verify/v1"
_DIGEST_ARG = re.compile(r"^sha256:[0-9a-fA-F]{64}$")


def tuf_from(
    tuf_url: str | None, tuf_root: Path | None, trusted_root: str | None
) -> TufRepository | None:
    """The TUF repository of `--tuf-url`/`--tuf-root`, or None; the flags conflict with --trusted-root."""
    if tuf_url is None:
        if tuf_root is not None:
            raise InputError(
                "--tuf-root given without --tuf-url",
                why="the root.json starts the TUF client of one repository",
                fix="add --tuf-url URL of the repository it belongs to",
            )
        return None
    if trusted_root is not None:
        raise InputError(
            "--tuf-url and --trusted-root both given",
            why="the trusted root comes either from a TUF repository or from the named root",
            fix="drop one of them",
        )
    from secureml.supplychain.tuf_refresh import TufRepository

    return TufRepository.at(tuf_url, tuf_root)


def identities_from(
    identity: str | None, regexp: str | None, issuer: str | None, *, alternative: str = ""
) -> list[TrustedIdentity]:
    from secureml.supplychain.identity import identities_from_flags

    return identities_from_flags(
        identity=identity, identity_regexp=regexp, issuer=issuer, alternative=alternative
    )


def describe(signed: VerifiedSignature) -> str:
    how = "cosign v3 DSSE statement" if signed.kind == "dsse" else "message signature"
    return f"signed by {signed.signer} (issuer {signed.issuer}); {how}"


def verified_json(subject: str, signed: VerifiedSignature, bundle: str) -> dict[str, Any]:
    """`--format json` of a verification that succeeded (a failure is an error on stderr)."""
    return {
        "schema": SCHEMA,
        "verified": True,
        "subject": subject,
        "signer": signed.signer,
        "issuer": signed.issuer,
        "kind": signed.kind,
        "bundle": bundle,
    }


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(
            f"cannot read {what} {path}", why=err.strerror or str(err), fix="check the path"
        ) from None


def _artifact_arg(file_or_digest: str) -> tuple[bytes | str, str]:
    """The protocol's FILE_OR_DIGEST: a digest when it is sha256:<64 hex> and no such file exists."""
    if _DIGEST_ARG.match(file_or_digest) and not Path(file_or_digest).exists():
        return file_or_digest.lower(), "artifact"
    return _read(Path(file_or_digest), "artifact"), file_or_digest


@run_cli
def verify_image(
    image: Annotated[
        str,
        typer.Argument(metavar="IMAGE", help="Image pinned by digest: REPOSITORY@sha256:<hex>."),
    ],
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle", metavar="FILE", help="The image's Sigstore bundle (.sigstore.json)."
        ),
    ] = None,
    fetch: Annotated[
        bool,
        typer.Option("--fetch", help="Read the bundle from the image's registry (OCI referrers)."),
    ] = False,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            metavar="FILE",
            help="Trust the identities (and root) of this TenantProfile.",
        ),
    ] = None,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    trusted_root: TrustedRootOption = None,
    online: OnlineOption = False,
    tuf_url: TufUrlOption = None,
    tuf_root: TufRootOption = None,
    output: FormatOption = "text",
) -> None:
    """Verify an image's Sigstore signature offline: who signed it, and that they are trusted.

    Exit 0: verified. 1: no bundle, none that verifies, or an untrusted signer. 2: unusable flags or files, or a registry or trust root that cannot be reached.
    """
    from secureml.core.image_ref import ImageRef
    from secureml.supplychain.identity import identities_from_profile
    from secureml.supplychain.image_bundles import read_bundle_file, verify_with_bundles
    from secureml.supplychain.verifier import SignatureVerifier

    try:
        ref = ImageRef.parse(image)
    except SecuremlError as err:  # a malformed argument is unusable input, not a failed check
        raise InputError(err.what, why=err.why, fix=err.fix) from None
    root: str = trusted_root or "production"
    base_dir = None
    if profile is not None:
        if certificate_identity or certificate_identity_regexp:
            raise InputError(
                "--profile and --certificate-identity[-regexp] both given",
                why="the trusted signers come from one place",
                fix="use either the profile's identities or the flags",
            )
        from secureml.profile.model import load_profile

        loaded = load_profile(profile)
        identities = identities_from_profile(loaded)
        root = trusted_root or loaded.spec.images.signatures.trusted_root
        base_dir = profile.parent if trusted_root is None else None
    else:
        identities = identities_from(
            certificate_identity,
            certificate_identity_regexp,
            certificate_oidc_issuer,
            alternative="--profile",
        )
    if (bundle is None) == (not fetch):
        raise InputError(
            "give exactly one of --bundle FILE or --fetch",
            why="the signature bundle comes either from a file or from the registry",
            fix="add --bundle sha256-<hex>.sigstore.json, or --fetch",
        )
    tuf = tuf_from(tuf_url, tuf_root, trusted_root)
    verifier = SignatureVerifier(root, base_dir=base_dir, online=online, tuf=tuf)
    if bundle is not None:
        candidates = [read_bundle_file(bundle)]
    else:
        from secureml.supplychain.registry import fetch_bundles

        candidates = [(b.content, b.source) for b in fetch_bundles(ref)]
    outcome = verify_with_bundles(ref, candidates, verifier, identities)
    if outcome.failure is not None:
        raise outcome.failure
    assert outcome.signed is not None and outcome.source is not None
    if output == "json":
        emit_json(verified_json(ref.by_digest(), outcome.signed, outcome.source))
    else:
        typer.echo(
            f"verified: {ref.by_digest()} {describe(outcome.signed)}; bundle {outcome.source}"
        )


@run_cli
def verify_bundle(
    file_or_digest: Annotated[
        str,
        typer.Argument(metavar="FILE_OR_DIGEST", help="The artifact, or its sha256:<hex> digest."),
    ],
    bundle: Annotated[
        Path, typer.Option("--bundle", metavar="FILE", help="The Sigstore bundle to verify.")
    ],
    staging: Annotated[
        bool, typer.Option("--staging", help="Use the Sigstore staging instance's trusted root.")
    ] = False,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            metavar="FILE",
            help="PEM public key of a managed-key bundle (instead of identity flags).",
        ),
    ] = None,
    trusted_root: Annotated[
        Path | None,
        typer.Option("--trusted-root", metavar="FILE", help="A custom trusted_root.json."),
    ] = None,
    output: FormatOption = "text",
) -> None:
    """Verify a bundle over a file or digest (the sigstore-conformance `verify-bundle` protocol).

    Exit 0: verified. 1: the bundle does not verify, or its signer is not the one given. 2: unusable flags or files.
    """
    from secureml.supplychain.verifier import SignatureVerifier

    root = (
        str(trusted_root) if trusted_root is not None else ("staging" if staging else "production")
    )
    artifact, name = _artifact_arg(file_or_digest)
    if key is not None:
        if certificate_identity or certificate_identity_regexp or certificate_oidc_issuer:
            raise InputError(
                "--key and --certificate-identity[-regexp]/--certificate-oidc-issuer both given",
                why="a managed-key bundle is signed by a key, not by a certificate identity",
                fix="pass either --key or the certificate identity flags",
            )
        from secureml.supplychain.managed_key import verify_with_key

        by_key = verify_with_key(
            artifact,
            _read(bundle, "bundle"),
            _read(key, "key"),
            root,
            key_source=str(key),
            bundle_source=str(bundle),
            artifact_name=name,
        )
        logged = f"{by_key.log_url} at index {by_key.log_index}"
        if output == "json":
            emit_json(
                {
                    "schema": SCHEMA,
                    "verified": True,
                    "subject": file_or_digest,
                    "key": by_key.key_fingerprint,
                    "kind": "message-signature",
                    "bundle": str(bundle),
                    "log": logged,
                }
            )
        else:
            typer.echo(
                f"verified: {file_or_digest} signed by key {by_key.key_fingerprint}; message "
                f"signature; logged in {logged} ({by_key.integrated_time:%Y-%m-%dT%H:%M:%SZ})"
            )
        return
    identities = identities_from(
        certificate_identity,
        certificate_identity_regexp,
        certificate_oidc_issuer,
        alternative="--key",
    )
    signed = SignatureVerifier(root).verify_artifact(
        artifact, _read(bundle, "bundle"), identities, bundle_source=str(bundle), artifact_name=name
    )
    if output == "json":
        emit_json(verified_json(file_or_digest, signed, str(bundle)))
    else:
        typer.echo(f"verified: {file_or_digest} {describe(signed)}")
