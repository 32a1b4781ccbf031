"""DSSE envelopes signed with a key the user holds, in a Sigstore bundle (v0.3) with no log entry."""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from secureml.core.errors import InputError
from secureml.supplychain.dsse_pae import pae
from secureml.supplychain.managed_key import _hint_hex, fingerprint, load_public_key
from secureml.supplychain.verifier import IN_TOTO_PAYLOAD_TYPE, SignatureError, _first_line

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PASSWORD_ENV = "SECUREML_ATTEST_KEY_PASSWORD"
_CURVE_HASH: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A private key loaded for signing, with the fingerprint a verifier will see."""

    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    fingerprint: str  # sha256:<hex> of the public key's DER SubjectPublicKeyInfo


def load_signing_key(pem: bytes, source: str) -> SigningKey:
    """The private key of a PEM file; an `InputError` saying why when it cannot sign."""
    password = os.environ.get(PASSWORD_ENV)
    if b"ENCRYPTED SIGSTORE PRIVATE KEY" in pem:
        raise InputError(
            f"{source} is a cosign-encrypted key",
            why="secureml reads PEM private keys (PKCS#8, SEC1, PKCS#1), not cosign's own format",
            fix="export it as PKCS#8 (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)",
        )
    try:
        key: PrivateKeyTypes = serialization.load_pem_private_key(
            pem, password.encode() if password else None
        )
    except TypeError as err:  # encrypted without a password, or a password for a plain key
        raise InputError(
            f"cannot read private key {source}",
            why=_first_line(err),
            fix=f"set {PASSWORD_ENV} to the key's password (only when the PEM is encrypted)",
        ) from None
    except ValueError as err:
        raise InputError(
            f"{source} is not a usable PEM private key",
            why=_first_line(err),
            fix="pass an ECDSA (P-256/384/521), RSA (2048+ bits) or Ed25519 private key in PEM",
        ) from None
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise InputError(
            f"{source}: unsupported key type {type(key).__name__}",
            fix="use an ECDSA, RSA or Ed25519 key",
        )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    load_public_key(public_pem, source)  # the same curve and size limits as verification
    return SigningKey(key, fingerprint(key.public_key()))


def sign_statement(statement: bytes, signing: SigningKey) -> bytes:
    """A v0.3 Sigstore bundle holding a DSSE envelope over the in-toto `statement`."""
    message = pae(IN_TOTO_PAYLOAD_TYPE, statement)
    key = signing.key
    if isinstance(key, ec.EllipticCurvePrivateKey):
        signature = key.sign(message, ec.ECDSA(_CURVE_HASH[key.curve.name]()))
    elif isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
    else:
        signature = key.sign(message)
    hint = bytes.fromhex(signing.fingerprint.removeprefix("sha256:"))
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": base64.b64encode(hint).decode()},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(statement).decode(),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
        },
    }
    return (json.dumps(bundle, indent=2) + "\n").encode()


def verify_envelope(
    document: dict[str, Any], key_pem: bytes, *, key_source: str, subject: str, where: str
) -> tuple[str, bytes, str]:
    """Verify a bundle's DSSE envelope with a PEM public key: (payload type, payload, key fingerprint).

    `document` is the bundle's parsed JSON. Exactly one signature, and it must verify; a bundle
    whose verification material is a certificate is refused (verify it by identity instead).
    """
    key = load_public_key(key_pem, key_source)

    def fail(what: str, why: str) -> SignatureError:
        return SignatureError(
            "invalid",
            f"{subject}: {what}",
            why=why,
            fix="verify with the public key of the key that signed this attestation; re-attest if the pipeline was recompiled",
            where=where,
        )

    material = document.get("verificationMaterial")
    if not isinstance(material, dict) or "publicKey" not in material:
        raise fail(
            "not a key-signed attestation",
            "its verification material is a certificate, not a public key hint",
        )
    envelope = document.get("dsseEnvelope")
    signatures = envelope.get("signatures") if isinstance(envelope, dict) else None
    if not isinstance(envelope, dict) or not isinstance(signatures, list) or len(signatures) != 1:
        raise fail(
            "not a DSSE envelope with one signature",
            "the bundle has no dsseEnvelope, or not exactly one signature",
        )
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        signature = base64.b64decode(signatures[0]["sig"], validate=True)
        payload_type = str(envelope["payloadType"])
    except (KeyError, TypeError, binascii.Error, ValueError) as err:
        raise fail("unreadable DSSE envelope", _first_line(err)) from None
    given = fingerprint(key)
    try:
        _verify(key, signature, pae(payload_type, payload))
    except InvalidSignature:
        hint = (
            material["publicKey"].get("hint") if isinstance(material["publicKey"], dict) else None
        )
        named = _hint_hex(hint if isinstance(hint, str) else None)
        other = f"; the bundle names key {named}" if named and named != given else ""
        raise fail(
            "signature does not verify",
            f"bad signature: not by key {given} over this statement (statement or signature altered){other}",
        ) from None
    return payload_type, payload, given


def _verify(key: PublicKeyTypes, signature: bytes, message: bytes) -> None:
    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(signature, message, ec.ECDSA(_CURVE_HASH[key.curve.name]()))
    elif isinstance(key, rsa.RSAPublicKey):
        key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
    else:
        assert isinstance(key, ed25519.Ed25519PublicKey)  # load_public_key admits no other type
        key.verify(signature, message)
