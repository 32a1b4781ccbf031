"""Verify DSSE bundles logged as Rekor v1 `intoto` 0.0.2 entries, which sigstore-python 4.x refuses.

docs/sigstore-conformance.md says which checks run; tests/supplychain/test_intoto_entry.py.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

from secureml.supplychain.dsse_pae import pae
from secureml.supplychain.root_windows import check_root_windows

if TYPE_CHECKING:
    from sigstore.verify.policy import VerificationPolicy

    from secureml.supplychain.trust import TrustedVerifier

INTOTO_KIND = ("intoto", "0.0.2")


class IntotoEntryError(Exception):
    """The `intoto` log entry does not record this bundle's envelope."""


def log_entry_kind(document: dict[str, Any]) -> tuple[str, str] | None:
    """The (kind, version) label of a bundle's single log entry, or None when it has no such label."""
    entries = document.get("verificationMaterial", {}).get("tlogEntries")
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        return None
    label = entries[0].get("kindVersion")
    if not isinstance(label, dict):
        return None
    return str(label.get("kind", "")), str(label.get("version", ""))


def verify_intoto_dsse(
    verifier: TrustedVerifier, document: dict[str, Any], policy: VerificationPolicy
) -> tuple[str, bytes]:
    """Verify a DSSE bundle with an `intoto` 0.0.2 entry; return (payload type, payload) like `verify_dsse`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding
    from sigstore.models import Bundle
    from sigstore_models.bundle.v1 import Bundle as BundleMessage

    from secureml.supplychain.sigstore_private import verify_signing_certificate

    entry = document["verificationMaterial"]["tlogEntries"][0]
    try:
        body = json.loads(base64.b64decode(entry["canonicalizedBody"], validate=True))
    except (KeyError, TypeError, ValueError, binascii.Error) as err:
        raise IntotoEntryError(f"the log entry's body is unreadable: {err}") from None
    relabelled = copy.deepcopy(document)
    relabelled["verificationMaterial"]["tlogEntries"][0]["kindVersion"] = {
        "kind": "dsse",
        "version": "0.0.1",
    }
    text = json.dumps(relabelled)
    bundle = Bundle.from_json(text)
    verify_signing_certificate(verifier.verifier, bundle, policy)
    check_root_windows(verifier, bundle)
    envelope = BundleMessage.from_json(text).dsse_envelope
    if envelope is None:
        raise IntotoEntryError("an intoto log entry needs a DSSE envelope in the bundle")
    if len(envelope.signatures) != 1:
        raise IntotoEntryError(f"DSSE: exactly 1 signature allowed, got {len(envelope.signatures)}")
    signature = envelope.signatures[0].sig
    certificate = bundle.signing_certificate
    key = certificate.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise IntotoEntryError("DSSE: the signing certificate's key is not an ECDSA key")
    try:
        key.verify(
            signature, pae(envelope.payload_type, envelope.payload), ec.ECDSA(hashes.SHA256())
        )
    except InvalidSignature:
        raise IntotoEntryError("DSSE: invalid signature") from None
    _check_body(
        body,
        signature=signature,
        certificate_der=certificate.public_bytes(Encoding.DER),
        payload_type=envelope.payload_type,
        payload=envelope.payload,
    )
    return envelope.payload_type, envelope.payload


def _check_body(
    body: Any,
    *,
    signature: bytes,
    certificate_der: bytes,
    payload_type: str,
    payload: bytes,
) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    if not isinstance(body, dict) or (body.get("kind"), body.get("apiVersion")) != INTOTO_KIND:
        raise IntotoEntryError("the log entry's body is not an intoto 0.0.2 entry, as labelled")
    content = body.get("spec", {}).get("content", {})
    envelope = content.get("envelope", {}) if isinstance(content, dict) else {}
    signatures = envelope.get("signatures") if isinstance(envelope, dict) else None
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise IntotoEntryError("the log entry must record exactly one signature")
    logged = signatures[0] if isinstance(signatures[0], dict) else {}
    try:
        logged_signature = _b64(_b64(logged.get("sig")))
    except IntotoEntryError:
        logged_signature = b""  # not Rekor's double base64: cannot be this signature
    if logged_signature != signature:
        raise IntotoEntryError("the logged signature is not the envelope's signature")
    try:
        logged_cert = x509.load_pem_x509_certificate(_b64(logged.get("publicKey"))).public_bytes(
            Encoding.DER
        )
    except (IntotoEntryError, ValueError) as err:
        raise IntotoEntryError(f"the logged public key is not a certificate: {err}") from None
    if logged_cert != certificate_der:
        raise IntotoEntryError("the logged certificate is not the bundle's signing certificate")
    if envelope.get("payloadType") != payload_type:
        raise IntotoEntryError("the logged payload type is not the envelope's")
    payload_hash = content.get("payloadHash", {})
    expected = {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}
    if not isinstance(payload_hash, dict) or {k: payload_hash.get(k) for k in expected} != expected:
        raise IntotoEntryError(
            "the logged payload hash is not the SHA-256 of the envelope's payload"
        )


def _b64(value: Any) -> bytes:
    if not isinstance(value, (str, bytes)):
        raise IntotoEntryError("a base64 field of the log entry is missing")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise IntotoEntryError("a base64 field of the log entry is not base64") from None
