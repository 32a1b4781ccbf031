"""Verify managed-key Sigstore bundles: a message signature by a PEM public key, logged in Rekor v1.

docs/sigstore-conformance.md ("Managed keys") lists the checks, in order.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from secureml.core.errors import InputError
from secureml.supplychain.trust import (
    load_trusted_root,
    require_tested_sigstore,
    resolve_trusted_root,
)
from secureml.supplychain.verifier import (
    FailureKind,
    SignatureError,
    _first_line,
    _parse_bundle_json,
    digest_hex,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
    from sigstore_models.common.v1 import HashOutput

Fail = Callable[
    ..., SignatureError
]  # builds the SignatureError for (what, why[, kind]) of one verification

_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
_MIN_RSA_BITS = 2048


@dataclass(frozen=True, slots=True)
class KeyVerifiedSignature:
    """A managed-key bundle that verified: which key signed, and where the log holds it."""

    key_fingerprint: str  # sha256:<hex> of the key's DER SubjectPublicKeyInfo
    log_url: str
    log_index: int
    integrated_time: datetime


def load_public_key(pem: bytes, source: str) -> PublicKeyTypes:
    """The public key in a PEM file; an `InputError` when it is not one."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as err:
        raise InputError(
            f"{source} is not a PEM public key",
            why=_first_line(err),
            fix="pass the signer's public key as written by `cosign generate-key-pair` (-----BEGIN PUBLIC KEY-----)",
        ) from None
    if isinstance(key, ec.EllipticCurvePublicKey) and not isinstance(key.curve, _CURVES):
        raise InputError(
            f"{source}: unsupported curve {key.curve.name}", fix="use a P-256, P-384 or P-521 key"
        )
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < _MIN_RSA_BITS:
        raise InputError(
            f"{source}: RSA key of {key.key_size} bits is too short",
            fix="use RSA of 2048 bits or more",
        )
    if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey):
        raise InputError(
            f"{source}: unsupported key type {type(key).__name__}",
            fix="use an ECDSA, RSA or Ed25519 key",
        )
    return key


def fingerprint(key: PublicKeyTypes) -> str:
    """`sha256:<hex>` of the key's DER SubjectPublicKeyInfo (what a bundle's `publicKey.hint` encodes)."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()


def verify_with_key(
    artifact: bytes | str,
    bundle_bytes: bytes,
    key_pem: bytes,
    trusted_root: str | Path,
    *,
    key_source: str = "key",
    bundle_source: str = "bundle",
    artifact_name: str = "artifact",
) -> KeyVerifiedSignature:
    """Verify a managed-key bundle over a blob (its bytes, or its `sha256:<hex>` digest)."""
    require_tested_sigstore()
    from sigstore.models import Bundle
    from sigstore_models.bundle.v1 import Bundle as BundleMessage

    from secureml.supplychain.sigstore_private import verify_log_entry

    key = load_public_key(key_pem, key_source)
    if isinstance(artifact, bytes):
        raw: bytes | None = artifact
        digest = hashlib.sha256(artifact).digest()
    else:
        parsed = digest_hex(artifact)
        if parsed is None:
            raise InputError(
                f"{artifact!r} is not a sha256 digest",
                fix="pass the file, or sha256:<64 hex digits>",
            )
        raw, digest = None, bytes.fromhex(parsed)
    subject = f"{artifact_name} (sha256:{digest.hex()})"

    def fail(what: str, why: str, kind: FailureKind = "invalid") -> SignatureError:
        return SignatureError(
            kind,
            f"{subject}: {what}",
            why=why,
            fix="obtain the bundle and key used when this exact content was signed; re-sign if it was rebuilt",
            where=bundle_source,
        )

    document = _parse_bundle_json(bundle_bytes, bundle_source)
    try:
        message = BundleMessage.from_json(bundle_bytes)
        Bundle.BundleType(message.media_type)
    except Exception as err:  # noqa: BLE001 - pydantic, base64, unknown media type: an unusable bundle (fails closed)
        raise fail("not a valid Sigstore bundle", _first_line(err)) from None
    material = message.verification_material
    if material.public_key is None:
        raise fail(
            "not a managed-key bundle",
            "its verification material is a certificate, not a public key hint",
        )
    if message.message_signature is None or "dsseEnvelope" in document:
        raise fail(
            "unsupported managed-key bundle",
            "only message signatures are verified with --key, not DSSE envelopes",
        )
    if len(material.tlog_entries) != 1:
        raise fail(
            "log entry missing or ambiguous",
            f"expected exactly one tlog entry, found {len(material.tlog_entries)}",
        )
    entry = material.tlog_entries[0]
    kind_version = (entry.kind_version.kind, entry.kind_version.version)
    if kind_version != ("hashedrekord", "0.0.1"):
        raise fail(
            "unsupported log entry",
            f"entry is {kind_version[0]} {kind_version[1]}, expected hashedrekord 0.0.1",
        )

    signature = message.message_signature.signature
    _check_signature(
        key,
        signature,
        digest,
        raw,
        message.message_signature.message_digest,
        material.public_key.hint,
        fail,
    )

    root = load_trusted_root(resolve_trusted_root(trusted_root)).document
    log = next((tlog for tlog in root.tlogs if tlog.log_id.key_id == entry.log_id.key_id), None)
    log_id = base64.b64encode(entry.log_id.key_id).decode()
    if log is None:
        raise fail(
            "log not trusted",
            f"log id {log_id} is not a Rekor log of the trusted root",
            kind="untrusted",
        )
    if not entry.integrated_time or entry.inclusion_promise is None:
        raise fail(
            "log entry time is not proven",
            "the entry has no integrated time signed by an inclusion promise",
        )
    try:
        verify_log_entry(entry, log.public_key)
    except Exception as err:  # noqa: BLE001 - sigstore VerificationError/InvalidBundle, or malformed proof data: fail closed
        raise fail("log entry is not proven", f"{log.base_url}: {_first_line(err)}") from None

    integrated = datetime.fromtimestamp(entry.integrated_time, tz=UTC)
    window = log.public_key.valid_for
    if window is None or not (
        window.start <= integrated and (window.end is None or integrated <= window.end)
    ):
        shown = (
            "no validity window"
            if window is None
            else f"valid {window.start} to {window.end or 'now'}"
        )
        raise fail(
            "log entry outside the log key's validity",
            f"integrated at {integrated}; log {log.base_url} is {shown}",
        )

    _check_body(entry.canonicalized_body, key, signature, digest, fail)
    return KeyVerifiedSignature(
        key_fingerprint=fingerprint(key),
        log_url=log.base_url,
        log_index=int(entry.log_index),
        integrated_time=integrated,
    )


def _check_signature(
    key: PublicKeyTypes,
    signature: bytes,
    digest: bytes,
    raw: bytes | None,
    message_digest: HashOutput | None,
    hint: str | None,
    fail: Fail,
) -> None:
    if message_digest is not None:
        if message_digest.algorithm.value != "SHA2_256":
            raise fail(
                "unsupported digest",
                f"the bundle's message digest is {message_digest.algorithm.value}, not SHA2_256",
            )
        if message_digest.digest != digest:
            raise fail(
                "signature does not verify",
                f"wrong digest: the bundle signs sha256:{message_digest.digest.hex()}",
            )
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, digest, padding.PKCS1v15(), Prehashed(hashes.SHA256()))
        else:
            assert isinstance(key, ed25519.Ed25519PublicKey)  # load_public_key admits no other type
            if raw is None:
                raise fail(
                    "cannot verify an Ed25519 signature from a digest",
                    "Ed25519 signs the artifact's bytes, not its SHA-256; pass the file instead",
                )
            key.verify(signature, raw)
    except InvalidSignature:
        named = _hint_hex(hint)
        given = fingerprint(key)
        other = (
            f"; the bundle names key {named}, the key given is {given}"
            if named and named != given
            else ""
        )
        raise fail(
            "signature does not verify",
            f"bad signature: not by key {given} over sha256:{digest.hex()}{other}",
        ) from None


def _hint_hex(hint: str | None) -> str | None:
    try:
        decoded = base64.b64decode(hint or "", validate=True)
    except (binascii.Error, ValueError):
        return None
    return f"sha256:{decoded.hex()}" if len(decoded) == 32 else None


def _check_body(
    body: bytes, key: PublicKeyTypes, signature: bytes, digest: bytes, fail: Fail
) -> None:
    """The hashedrekord body must record exactly this signature, key and digest (cf. CVE-2022-36056)."""
    import rekor_types

    try:
        spec = rekor_types.Hashedrekord.model_validate_json(body).spec.root
        logged_key_field, logged_hash = spec.signature.public_key, spec.data.hash
        logged_key_pem = logged_key_field.content if logged_key_field is not None else None
        if spec.signature.content is None or logged_key_pem is None or logged_hash is None:
            raise ValueError("the signature, its public key or the data hash is missing")
        logged_signature = base64.b64decode(spec.signature.content, validate=True)
        logged_key = serialization.load_pem_public_key(
            base64.b64decode(logged_key_pem, validate=True)
        )
        algorithm, value = logged_hash.algorithm.value, logged_hash.value
    except Exception as err:  # noqa: BLE001 - pydantic, base64, PEM: the logged body is not a usable hashedrekord (fails closed)
        raise fail(
            "log entry does not match the bundle",
            f"its body is not a hashedrekord 0.0.1: {_first_line(err)}",
        ) from None
    if logged_signature != signature:
        raise fail(
            "log entry does not match the bundle", "the logged signature differs from the bundle's"
        )
    if fingerprint(logged_key) != fingerprint(key):
        raise fail(
            "log entry does not match the bundle",
            f"the logged key is {fingerprint(logged_key)}, not {fingerprint(key)}",
        )
    if (algorithm, value) != ("sha256", digest.hex()):
        raise fail(
            "log entry does not match the bundle",
            f"the logged artifact is {algorithm}:{value}, not sha256:{digest.hex()}",
        )
