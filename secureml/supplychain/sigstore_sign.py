"""Sign an in-toto statement with Sigstore, keyless: the CI job's ambient OIDC identity."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from secureml.core.errors import InputError, NetworkError
from secureml.supplychain.verifier import _first_line

if TYPE_CHECKING:
    from sigstore.models import ClientTrustConfig


def ambient_token() -> str:
    """The CI job's OIDC identity token for Sigstore; `InputError` when there is none."""
    from sigstore.oidc import IdentityError, detect_credential

    try:
        token = detect_credential()
    except IdentityError as err:
        raise InputError(
            "cannot obtain the CI job's OIDC identity for signing",
            why=_first_line(err),
            fix="grant the job an identity token (GitHub Actions: permissions: id-token: write), "
            "or sign with a key: --attest-key KEY.pem",
        ) from None
    if token is None:
        raise InputError(
            "no ambient OIDC identity to sign the attestation with",
            why="keyless signing needs a CI identity token (GitHub Actions, GitLab, Buildkite, "
            "CircleCI, Google Cloud); none was found in this environment",
            fix="run in CI with an identity token, or sign with a key: --attest-key KEY.pem",
        )
    return token


def sign_statement_keyless(statement: bytes, token: str, trust_config: Path | None) -> bytes:
    """A Sigstore bundle (Fulcio certificate, Rekor entry) over a DSSE envelope of `statement`."""
    from sigstore import dsse
    from sigstore.oidc import IdentityError, IdentityToken
    from sigstore.sign import SigningContext

    try:
        identity = IdentityToken(token)
    except IdentityError as err:
        raise InputError(
            "the ambient OIDC identity token cannot be used", why=_first_line(err)
        ) from None
    config = _trust_config(trust_config)
    try:
        context = SigningContext.from_trust_config(config)
        # cache=True (the default) is required: sigstore 4.5.1's uncached signer makes a new
        # ephemeral key on each use, so the certificate and the signature would not match
        with context.signer(identity) as signer:
            bundle = signer.sign_dsse(dsse.Statement(statement))
    except Exception as err:  # noqa: BLE001 - Fulcio, Rekor, TSA clients raise many types: the attestation is not written (fails closed)
        raise NetworkError(
            "Sigstore signing of the attestation failed",
            why=_first_line(err),
            fix="check network access to the Sigstore instance (Fulcio, Rekor), or sign with --attest-key",
        ) from None
    return (bundle.to_json() + "\n").encode()


def _trust_config(path: Path | None) -> ClientTrustConfig:
    from sigstore.models import ClientTrustConfig

    if path is None:
        try:
            return ClientTrustConfig.production()
        except Exception as err:  # noqa: BLE001 - TUF raises many types; all mean "could not refresh"
            raise NetworkError(
                "cannot fetch the Sigstore signing configuration through TUF",
                why=_first_line(err),
                fix="check network access, or give a private instance's --attest-trust-config",
            ) from None
    try:
        return ClientTrustConfig.from_json(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(
            f"cannot read --attest-trust-config {path}", why=err.strerror or str(err)
        ) from None
    except Exception as err:  # noqa: BLE001 - pydantic/JSON: not a ClientTrustConfig
        raise InputError(
            f"--attest-trust-config {path} is not a Sigstore ClientTrustConfig",
            why=_first_line(err),
            fix="give the JSON `sigstore sign --trust-config` reads "
            "(mediaType application/vnd.dev.sigstore.clienttrustconfig.v0.1+json)",
        ) from None
