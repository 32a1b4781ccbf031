"""Verify Sigstore bundles offline with sigstore-python, and say why when they do not verify."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.identity import IdentityPolicy, TrustedIdentity, UntrustedSignerError
from secureml.supplychain.intoto_entry import INTOTO_KIND, log_entry_kind, verify_intoto_dsse
from secureml.supplychain.root_windows import check_root_windows
from secureml.supplychain.trust import resolve_trusted_root, verifier_for
from secureml.supplychain.tuf_refresh import TufRepository, refresh_trusted_root

if TYPE_CHECKING:
    from sigstore.models import Bundle
    from sigstore.verify.policy import VerificationPolicy

    from secureml.supplychain.trust import TrustedVerifier

COSIGN_SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
IN_TOTO_STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")

_DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")

FailureKind = Literal["missing", "invalid", "untrusted"]


class SignatureError(SecuremlError):
    """A signature that is absent, does not verify, or is by an untrusted signer (exit 1)."""

    exit_code = 1

    def __init__(
        self, kind: FailureKind, what: str, *, why: str = "", fix: str = "", where: str = ""
    ) -> None:
        self.kind = kind
        super().__init__(what, why=why, fix=fix, where=where)

    def rule(self, area: str = "image") -> str:
        """The rule id for this failure, e.g. `image.signer-untrusted` or `profile.signature-invalid`."""
        suffix = {
            "missing": "signature-missing",
            "invalid": "signature-invalid",
            "untrusted": "signer-untrusted",
        }
        return f"{area}.{suffix[self.kind]}"


@dataclass(frozen=True, slots=True)
class VerifiedSignature:
    """A bundle that verified: who signed, and how."""

    signer: str  # the certificate subject (SAN) that matched
    issuer: str
    kind: Literal["dsse", "message-signature"]
    predicate_type: str | None  # DSSE only
    trusted_identity: str  # the trusted identity it matched, as text


def digest_hex(text: str) -> str | None:
    """The hex of a `sha256:<64 lowercase hex>` digest, or None when `text` is not one."""
    match = _DIGEST_RE.match(text)
    return match.group(1) if match else None


class SignatureVerifier:
    """Verifies bundles against one trusted root; keep one around (the sigstore verifier is warm).

    With `tuf`, the root is the one that TUF repository publishes, refreshed now (and `trusted_root`
    is ignored); a refresh that fails or is refused raises (exit 2), it never falls back.
    """

    def __init__(
        self,
        trusted_root: str | Path = "production",
        *,
        base_dir: Path | None = None,
        online: bool = False,
        tuf: TufRepository | None = None,
    ) -> None:
        if tuf is not None:
            trusted_root, online = refresh_trusted_root(tuf), False
        self.trusted_root = resolve_trusted_root(trusted_root, base_dir=base_dir)
        self._verifier = verifier_for(self.trusted_root, online=online)

    def verify_image(
        self,
        image: ImageRef | str,
        bundle: bytes,
        identities: Sequence[TrustedIdentity],
        *,
        bundle_source: str = "bundle",
    ) -> VerifiedSignature:
        """Verify a bundle for a digest-pinned image: cosign v3 DSSE, or a signature over the digest."""
        ref = image if isinstance(image, ImageRef) else ImageRef.parse(image)
        if ref.digest_hex is None:
            raise SignatureError(
                "missing",
                f"image {ref} is not pinned by digest",
                why="a signature covers a manifest digest; a tag can point at other content later",
                fix="reference the image as REPOSITORY@sha256:<digest>",
            )
        return self._verify(
            ref.digest_hex,
            None,
            bundle,
            identities,
            bundle_source=bundle_source,
            subject=f"image {ref.by_digest()}",
            predicate_type=COSIGN_SIGN_PREDICATE,
        )

    def verify_artifact(
        self,
        artifact: bytes | str,
        bundle: bytes,
        identities: Sequence[TrustedIdentity],
        *,
        bundle_source: str = "bundle",
        artifact_name: str = "artifact",
    ) -> VerifiedSignature:
        """Verify a blob (its bytes, or its `sha256:<hex>` digest) against a bundle."""
        if isinstance(artifact, bytes):
            hex_digest, raw = hashlib.sha256(artifact).hexdigest(), artifact
        else:
            parsed = digest_hex(artifact)
            if parsed is None:
                raise SecuremlError(
                    f"{artifact!r} is not a sha256 digest",
                    why="a digest is 'sha256:' followed by 64 lowercase hex digits",
                    fix="pass the file itself, or its digest as sha256:<hex>",
                )
            hex_digest, raw = parsed, None
        return self._verify(
            hex_digest,
            raw,
            bundle,
            identities,
            bundle_source=bundle_source,
            subject=f"{artifact_name} (sha256:{hex_digest})",
            predicate_type=None,
        )

    def _verify(
        self,
        hex_digest: str,
        raw: bytes | None,
        bundle_bytes: bytes,
        identities: Sequence[TrustedIdentity],
        *,
        bundle_source: str,
        subject: str,
        predicate_type: str | None,
    ) -> VerifiedSignature:
        from sigstore.hashes import Hashed
        from sigstore.models import Bundle
        from sigstore_models.common.v1 import HashAlgorithm

        if not identities:
            raise SignatureError(
                "untrusted",
                f"no trusted signer identities to check {subject} against",
                why="a signature proves nothing unless its signer is one the tenant trusts",
                fix="list identities under spec.images.signatures.identities, or pass identity flags",
            )
        document = _parse_bundle_json(bundle_bytes, bundle_source)
        try:
            bundle = Bundle.from_json(bundle_bytes)
        except Exception as err:  # noqa: BLE001 - InvalidBundle, pydantic, base64: all mean "unusable bundle" (fails closed)
            raise SignatureError(
                "invalid",
                f"{bundle_source} is not a valid Sigstore bundle",
                why=_first_line(err),
                fix="use the .sigstore.json bundle written by cosign/sigstore for this exact artifact",
            ) from None
        policy = IdentityPolicy(identities)
        is_dsse = "dsseEnvelope" in document
        try:
            if is_dsse:
                payload_type, payload = verify_dsse(self._verifier, document, bundle, policy)
            else:
                hashed = Hashed(algorithm=HashAlgorithm.SHA2_256, digest=bytes.fromhex(hex_digest))
                self._verifier.verifier.verify_artifact(
                    raw if raw is not None else hashed, bundle, policy
                )
                check_root_windows(self._verifier, bundle)
        except UntrustedSignerError as err:
            raise SignatureError(
                "untrusted",
                f"{subject}: signer is not trusted",
                why=str(err),
                fix="sign with a trusted identity, or (platform team) add the signer to the profile's identities",
                where=bundle_source,
            ) from None
        except Exception as err:  # noqa: BLE001 - sigstore.errors.Error, or anything malformed input provokes: fail closed
            raise SignatureError(
                "invalid",
                f"{subject}: signature does not verify",
                why=_explain(err, document, hex_digest),
                fix="obtain the bundle produced when this exact content was signed; re-sign if it was rebuilt",
                where=bundle_source,
            ) from None
        if is_dsse:
            found_predicate = _check_statement(
                payload_type, payload, hex_digest, predicate_type, subject, bundle_source
            )
        else:
            found_predicate = None
        matched, signer = policy.matched, policy.matched_subject
        assert matched is not None and signer is not None  # the policy ran and accepted
        return VerifiedSignature(
            signer=signer,
            issuer=matched.issuer,
            kind="dsse" if is_dsse else "message-signature",
            predicate_type=found_predicate,
            trusted_identity=str(matched),
        )


def verify_dsse(
    verifier: TrustedVerifier, document: dict[str, Any], bundle: Bundle, policy: VerificationPolicy
) -> tuple[str, bytes]:
    """A DSSE bundle (`document` its JSON) verified as every secureml check verifies one: image
    attestations, model signatures and compile attestations alike. sigstore-python's
    `verify_dsse`, or `verify_intoto_dsse` for a Rekor v1 `intoto` 0.0.2 entry (which
    sigstore-python refuses), then the trusted root's validity windows at the signing time
    (sigstore-python compares them with now). Returns (payload type, payload)."""
    if log_entry_kind(document) == INTOTO_KIND:
        return verify_intoto_dsse(verifier, document, policy)  # checks the windows itself
    payload_type, payload = verifier.verifier.verify_dsse(bundle, policy)
    check_root_windows(verifier, bundle)
    return payload_type, payload


@dataclass(frozen=True)
class KeylessAdvice:
    """What to tell the user when a keyless DSSE bundle fails, per way of failing."""

    unusable: str  # the file is no Sigstore bundle
    untrusted: str  # it verifies, but its signer is no trusted identity
    invalid: str  # it does not verify


def verify_keyless_dsse(
    bundle_bytes: bytes,
    identities: Sequence[TrustedIdentity],
    verifier: TrustedVerifier,
    *,
    subject: str,
    whose: str,
    where: str,
    advice: KeylessAdvice,
) -> tuple[str, bytes, str, str]:
    """A keyless DSSE bundle (model signatures, compile attestations) through `verify_dsse`, every
    failure a `SignatureError` naming `subject` and, through `whose` ("" or "the attestation's "),
    what was signed; returns (payload type, payload, signer subject, signer issuer)."""
    from sigstore.models import Bundle

    document = _parse_bundle_json(bundle_bytes, where)
    try:
        bundle = Bundle.from_json(bundle_bytes)
    except Exception as err:  # noqa: BLE001 - InvalidBundle, pydantic, base64: an unusable bundle fails closed
        raise SignatureError(
            "invalid",
            f"{subject}: {whose}signature is not a valid Sigstore bundle",
            why=_first_line(err),
            fix=advice.unusable,
            where=where,
        ) from None
    policy = IdentityPolicy(identities)
    try:
        payload_type, payload = verify_dsse(verifier, document, bundle, policy)
    except UntrustedSignerError as err:
        raise SignatureError(
            "untrusted",
            f"{subject}: {whose}signer is not trusted",
            why=str(err),
            fix=advice.untrusted,
            where=where,
        ) from None
    except Exception as err:  # noqa: BLE001 - sigstore errors, or anything malformed input provokes: fail closed
        raise SignatureError(
            "invalid",
            f"{subject}: {whose}signature does not verify",
            why=f"Sigstore verification failed: {_first_line(err)}",
            fix=advice.invalid,
            where=where,
        ) from None
    assert policy.matched is not None and policy.matched_subject is not None
    return payload_type, payload, policy.matched_subject, policy.matched.issuer


def _parse_bundle_json(data: bytes, source: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise SignatureError(
            "invalid",
            f"{source} is not JSON",
            why=_first_line(err),
            fix="a Sigstore bundle is the JSON file written by `cosign sign --bundle` / `sigstore sign`",
        ) from None
    if not isinstance(document, dict):
        raise SignatureError(
            "invalid", f"{source} is not a Sigstore bundle", why="the JSON is not an object"
        )
    return document


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def _explain(err: BaseException, document: dict[str, Any], hex_digest: str) -> str:
    message = _first_line(err)
    if message == "Bundle message digest mismatch":
        signed = document.get("messageSignature", {}).get("messageDigest", {}).get("digest", "")
        try:
            signed_hex = base64.b64decode(signed).hex()
        except (binascii.Error, ValueError):
            signed_hex = "(unreadable)"
        return f"wrong digest: the bundle signs sha256:{signed_hex}, not sha256:{hex_digest}"
    if message == "Signature is invalid for input":
        return (
            "bad signature: it does not verify over sha256:"
            + hex_digest
            + " (content or signature altered)"
        )
    return f"Sigstore verification failed: {message}"


def _check_statement(
    payload_type: str,
    payload: bytes,
    hex_digest: str,
    predicate_type: str | None,
    subject: str,
    source: str,
) -> str:
    def fail(why: str) -> SignatureError:
        return SignatureError(
            "invalid",
            f"{subject}: signed statement does not cover it",
            why=why,
            fix="use the bundle cosign wrote for this image digest (cosign sign --new-bundle-format)",
            where=source,
        )

    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise fail(f"DSSE payload type is {payload_type!r}, expected {IN_TOTO_PAYLOAD_TYPE!r}")
    try:
        statement = json.loads(payload)
    except ValueError as err:
        raise fail(f"the in-toto statement is not JSON: {_first_line(err)}") from None
    if not isinstance(statement, dict) or statement.get("_type") not in IN_TOTO_STATEMENT_TYPES:
        raise fail("the DSSE payload is not an in-toto statement")
    found_predicate = statement.get("predicateType")
    if predicate_type is not None and found_predicate != predicate_type:
        raise fail(f"wrong predicate type {found_predicate!r}, expected {predicate_type!r}")
    subjects = statement.get("subject")
    digests = (
        [
            s.get("digest", {}).get("sha256")
            for s in subjects
            if isinstance(s, dict) and isinstance(s.get("digest"), dict)
        ]
        if isinstance(subjects, list)
        else []
    )
    if hex_digest not in digests:
        listed = ", ".join(f"sha256:{d}" for d in digests if isinstance(d, str)) or "none"
        raise fail(f"wrong digest: the statement's subjects are {listed}, not sha256:{hex_digest}")
    return str(found_predicate)
