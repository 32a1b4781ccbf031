"""`secureml verify-image`, `secureml verify-bundle` (the sigstore-conformance client protocol) and
`secureml profile verify`. Sigstore is imported inside the commands only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from secureml.cli import app, profile_app, run_cli
from secureml.errors import InputError

if TYPE_CHECKING:
    from secureml.supplychain.identity import TrustedIdentity
    from secureml.supplychain.verifier import VerifiedSignature

IdentityOpt = Annotated[
    str | None,
    typer.Option("--certificate-identity", help="Exact signer identity (certificate SAN)."),
]
IdentityRegexpOpt = Annotated[
    str | None,
    typer.Option(
        "--certificate-identity-regexp",
        help="Regular expression over the signer identity (re.search).",
    ),
]
IssuerOpt = Annotated[
    str | None,
    typer.Option("--certificate-oidc-issuer", help="Exact OIDC issuer of the signing certificate."),
]
TrustedRootOpt = Annotated[
    str | None,
    typer.Option(
        "--trusted-root",
        help="production | staging | path to a trusted_root.json (default production).",
    ),
]
OnlineOpt = Annotated[
    bool,
    typer.Option(
        "--online",
        help="Refresh the production/staging root through TUF instead of the shipped copy.",
    ),
]

_DIGEST_ARG = re.compile(r"^sha256:[0-9a-fA-F]{64}$")


def _flag_identities(
    identity: str | None, regexp: str | None, issuer: str | None
) -> list[TrustedIdentity]:
    from secureml.supplychain.identity import identities_from_flags

    return identities_from_flags(identity=identity, identity_regexp=regexp, issuer=issuer)


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


def _describe(signed: VerifiedSignature) -> str:
    how = "cosign v3 DSSE statement" if signed.kind == "dsse" else "message signature"
    return f"signed by {signed.signer} (issuer {signed.issuer}); {how}"


@app.command("verify-image")
@run_cli
def verify_image(
    image: Annotated[str, typer.Argument(help="Image pinned by digest: REPOSITORY@sha256:<hex>.")],
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="The image's Sigstore bundle (.sigstore.json)."),
    ] = None,
    fetch: Annotated[
        bool,
        typer.Option("--fetch", help="Read the bundle from the image's registry (OCI referrers)."),
    ] = False,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="Trust the identities (and root) of this TenantProfile."),
    ] = None,
    certificate_identity: IdentityOpt = None,
    certificate_identity_regexp: IdentityRegexpOpt = None,
    certificate_oidc_issuer: IssuerOpt = None,
    trusted_root: TrustedRootOpt = None,
    online: OnlineOpt = False,
) -> None:
    """Verify an image's Sigstore signature offline: who signed it, and that they are trusted."""
    from secureml.images import ImageRef
    from secureml.supplychain.identity import identities_from_profile
    from secureml.supplychain.verifier import SignatureError, SignatureVerifier

    ref = ImageRef.parse(image)
    root: str = trusted_root or "production"
    base_dir = None
    if profile is not None:
        if certificate_identity or certificate_identity_regexp:
            raise InputError(
                "--profile and --certificate-identity[-regexp] both given",
                why="the trusted signers come from one place",
                fix="use either the profile's identities or the flags",
            )
        from secureml.profile import load_profile

        loaded = load_profile(profile)
        identities = identities_from_profile(loaded)
        root = trusted_root or loaded.spec.images.signatures.trusted_root
        base_dir = profile.parent if trusted_root is None else None
    else:
        identities = _flag_identities(
            certificate_identity, certificate_identity_regexp, certificate_oidc_issuer
        )
    if (bundle is None) == (not fetch):
        raise InputError(
            "give exactly one of --bundle FILE or --fetch",
            why="the signature bundle comes either from a file or from the registry",
            fix="add --bundle sha256-<hex>.sigstore.json, or --fetch",
        )
    verifier = SignatureVerifier(root, base_dir=base_dir, online=online)
    if bundle is not None:
        candidates = [(_read(bundle, "bundle"), str(bundle))]
    else:
        from secureml.supplychain.registry import fetch_bundles

        candidates = [(b.content, b.source) for b in fetch_bundles(ref)]
    failure: SignatureError | None = None
    for content, source in candidates:
        try:
            signed = verifier.verify_image(ref, content, identities, bundle_source=source)
        except SignatureError as err:
            failure = failure if failure is not None and failure.kind == "untrusted" else err
            continue
        typer.echo(f"verified: {ref.by_digest()} {_describe(signed)}; bundle {source}")
        return
    assert failure is not None
    raise failure


@app.command("verify-bundle")
@run_cli
def verify_bundle(
    file_or_digest: Annotated[
        str,
        typer.Argument(metavar="FILE_OR_DIGEST", help="The artifact, or its sha256:<hex> digest."),
    ],
    bundle: Annotated[Path, typer.Option("--bundle", help="The Sigstore bundle to verify.")],
    staging: Annotated[
        bool, typer.Option("--staging", help="Use the Sigstore staging instance's trusted root.")
    ] = False,
    certificate_identity: IdentityOpt = None,
    certificate_identity_regexp: IdentityRegexpOpt = None,
    certificate_oidc_issuer: IssuerOpt = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key", help="PEM public key of a managed-key bundle (instead of identity flags)."
        ),
    ] = None,
    trusted_root: Annotated[
        Path | None, typer.Option("--trusted-root", help="A custom trusted_root.json.")
    ] = None,
) -> None:
    """Verify a bundle over a file or digest (the sigstore-conformance `verify-bundle` protocol)."""
    from secureml.supplychain.verifier import SignatureVerifier

    root = (
        str(trusted_root) if trusted_root is not None else ("staging" if staging else "production")
    )
    if key is not None:
        if certificate_identity or certificate_identity_regexp or certificate_oidc_issuer:
            raise InputError(
                "--key and --certificate-identity[-regexp]/--certificate-oidc-issuer both given",
                why="a managed-key bundle is signed by a key, not by a certificate identity",
                fix="pass either --key or the certificate identity flags",
            )
        from secureml.supplychain.managed_key import verify_with_key

        artifact, name = _artifact_arg(file_or_digest)
        by_key = verify_with_key(
            artifact,
            _read(bundle, "bundle"),
            _read(key, "key"),
            root,
            key_source=str(key),
            bundle_source=str(bundle),
            artifact_name=name,
        )
        typer.echo(
            f"verified: {file_or_digest} signed by key {by_key.key_fingerprint}; message signature; "
            f"logged in {by_key.log_url} at index {by_key.log_index} ({by_key.integrated_time:%Y-%m-%dT%H:%M:%SZ})"
        )
        return
    identities = _flag_identities(
        certificate_identity, certificate_identity_regexp, certificate_oidc_issuer
    )
    verifier = SignatureVerifier(root)
    artifact, name = _artifact_arg(file_or_digest)
    signed = verifier.verify_artifact(
        artifact, _read(bundle, "bundle"), identities, bundle_source=str(bundle), artifact_name=name
    )
    typer.echo(f"verified: {file_or_digest} {_describe(signed)}")


@profile_app.command("verify")
@run_cli
def profile_verify(
    profile: Annotated[
        Path, typer.Argument(help="The TenantProfile file, byte for byte as signed.")
    ],
    bundle: Annotated[
        Path | None, typer.Option("--bundle", help="Its bundle (default PROFILE.sigstore.json).")
    ] = None,
    certificate_identity: IdentityOpt = None,
    certificate_identity_regexp: IdentityRegexpOpt = None,
    certificate_oidc_issuer: IssuerOpt = None,
    trusted_root: TrustedRootOpt = None,
    online: OnlineOpt = False,
) -> None:
    """Check that a profile is exactly the one its platform team signed."""
    from secureml.supplychain.profiles import verify_signed_profile
    from secureml.supplychain.verifier import SignatureVerifier

    identities = _flag_identities(
        certificate_identity, certificate_identity_regexp, certificate_oidc_issuer
    )
    verifier = SignatureVerifier(trusted_root or "production", online=online)
    signed = verify_signed_profile(profile, bundle, identities, verifier=verifier)
    typer.echo(f"verified: profile {profile} {_describe(signed)}")
