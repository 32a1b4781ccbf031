"""Verify DSSE bundles logged as Rekor v1 `intoto` 0.0.2 entries, which sigstore-python 4.x refuses.

sigstore-python accepts a DSSE bundle only with a `dsse` 0.0.1 (Rekor v1) or `hashedrekord` 0.0.2
(Rekor v2) log entry: `Verifier._establish_time` refuses the integrated time of any other kind
("Integrated time only supported for dsse/hashedrekord 0.0.1 types") and `verify_dsse` has no body
check for `intoto`. Older cosign and sigstore-go clients logged DSSE envelopes as `intoto` 0.0.2
entries, and sigstore-conformance's `intoto-with-custom-trust-root` is one.

Every check sigstore-python makes still runs, and one is added for the entry kind it lacks:

1. steps 0-6 of sigstore-python's verification (`Verifier._verify_common_signing_cert`): verified
   times (RFC 3161 and the integrated time under its inclusion promise), the certificate chain at
   each time, the SCT, the identity policy, the inclusion proof, checkpoint and signed entry
   timestamp, and the certificate's validity at each time; then the trusted root's validity windows
   at the signing time (root_windows.py). It runs on a copy of the bundle whose
   `kindVersion` label says `dsse`/0.0.1: that label is not covered by the log's signatures (the
   body is, and it is checked to say `intoto` 0.0.2 below), so only the gate changes;
2. the envelope's signature over its PAE, by the certificate's key (`sigstore.dsse._verify`);
3. the log body is this envelope (what sigstore-js checks for `intoto` 0.0.2): kind and version as
   labelled, exactly one signature, which (base64 twice in Rekor's encoding) is the envelope's, a
   `publicKey` that is the signing certificate, the same payload type, and `payloadHash` the
   SHA-256 of the payload.

`Verifier._verify_common_signing_cert`, `Bundle._dsse_envelope` and `sigstore.dsse._verify` are
private APIs of sigstore-python; `sigstore>=4.1,<5` pins the major version, and
tests/supplychain/test_intoto_entry.py fails if a release changes them.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any, cast

from secureml.supplychain.root_windows import check_root_windows

if TYPE_CHECKING:
    from sigstore.verify import Verifier
    from sigstore.verify.policy import VerificationPolicy

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
    verifier: Verifier, document: dict[str, Any], policy: VerificationPolicy
) -> tuple[str, bytes]:
    """Verify a DSSE bundle with an `intoto` 0.0.2 entry; return (payload type, payload) like `verify_dsse`."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding
    from sigstore import dsse
    from sigstore.models import Bundle

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
    bundle = Bundle.from_json(json.dumps(relabelled))
    verifier._verify_common_signing_cert(bundle, policy)
    check_root_windows(verifier, bundle)
    envelope = bundle._dsse_envelope
    if envelope is None:
        raise IntotoEntryError("an intoto log entry needs a DSSE envelope in the bundle")
    certificate = bundle.signing_certificate
    payload = dsse._verify(cast(ec.EllipticCurvePublicKey, certificate.public_key()), envelope)
    payload_type = envelope._inner.payload_type
    _check_body(
        body,
        signature=envelope.signature,
        certificate_der=certificate.public_bytes(Encoding.DER),
        payload_type=payload_type,
        payload=payload,
    )
    return payload_type, payload


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
