"""A private Sigstore instance for tests: a Fulcio-style CA, a CT log and a Rekor log, all keys
made here, and a `trusted_root.json` that names them.

It issues short-lived code-signing certificates the way Fulcio does (SAN identity, OIDC issuer
extensions, an embedded precertificate SCT), and logs each signature the way Rekor v1 does (a
`dsse`/`hashedrekord` 0.0.1 entry, a signed entry timestamp, a one-leaf Merkle tree with a signed
checkpoint). The resulting v0.3 bundles are verified by sigstore-python's unchanged `Verifier`,
exactly like bundles from the public-good instance; nothing in secureml knows this instance exists.
Used for what the public fixtures lack: cosign v3 image bundles and a signed TenantProfile.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

COSIGN_SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO = "application/vnd.in-toto+json"
SCT_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def spki(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: ec.EllipticCurvePrivateKey) -> bytes:
    return hashlib.sha256(spki(key)).digest()


def der_octet_string(content: bytes) -> bytes:
    length = len(content)
    if length < 0x80:
        return b"\x04" + bytes([length]) + content
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return b"\x04" + bytes([0x80 | len(encoded)]) + encoded + content


def der_utf8(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 0x80
    return b"\x0c" + bytes([len(raw)]) + raw


@dataclass
class PrivateSigstore:
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC).replace(microsecond=0))

    def __post_init__(self) -> None:
        curve = ec.SECP256R1()
        self.ca_key = ec.generate_private_key(curve)
        self.ct_key = ec.generate_private_key(curve)
        self.rekor_key = ec.generate_private_key(curve)
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secureml-test"),
                x509.NameAttribute(NameOID.COMMON_NAME, "secureml-test-fulcio"),
            ]
        )
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(days=1))
            .not_valid_after(self.now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False
            )
            .sign(self.ca_key, hashes.SHA256())
        )
        self.log_index = 0

    # --- the trusted root -------------------------------------------------------------------
    def trusted_root(self) -> dict:
        start = (self.now - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

        def log(key: ec.EllipticCurvePrivateKey, url: str) -> dict:
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": b64(spki(key)),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": start},
                },
                "logId": {"keyId": b64(key_id(key))},
            }

        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [log(self.rekor_key, "https://rekor.secureml.test")],
            "certificateAuthorities": [
                {
                    "subject": {
                        "organization": "secureml-test",
                        "commonName": "secureml-test-fulcio",
                    },
                    "uri": "https://fulcio.secureml.test",
                    "certChain": {
                        "certificates": [
                            {"rawBytes": b64(self.ca_cert.public_bytes(serialization.Encoding.DER))}
                        ]
                    },
                    "validFor": {"start": start},
                }
            ],
            "ctlogs": [log(self.ct_key, "https://ctfe.secureml.test")],
            "timestampAuthorities": [],
        }

    def write_trusted_root(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trusted_root(), indent=2))
        return path

    # --- Fulcio -------------------------------------------------------------------------------
    def issue(
        self, subject: str, issuer: str
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        return key, self.certify(key.public_key(), subject, issuer)

    def certify(
        self, public_key: ec.EllipticCurvePublicKey, subject: str, issuer: str
    ) -> x509.Certificate:
        """The certificate Fulcio would return for `public_key` (a CSR's) and this identity."""
        san = (
            x509.RFC822Name(subject)
            if "@" in subject and "://" not in subject
            else x509.UniformResourceIdentifier(subject)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca_cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=1))
            .not_valid_after(self.now + dt.timedelta(minutes=10))
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.UnrecognizedExtension(ISSUER_V1, issuer.encode()), critical=False)
            .add_extension(x509.UnrecognizedExtension(ISSUER_V2, der_utf8(issuer)), critical=False)
        )
        precert = builder.sign(self.ca_key, hashes.SHA256())
        sct_list = self._sct_list(precert.tbs_certificate_bytes)
        cert = builder.add_extension(
            x509.UnrecognizedExtension(SCT_OID, der_octet_string(sct_list)), critical=False
        ).sign(self.ca_key, hashes.SHA256())
        assert cert.tbs_precertificate_bytes == precert.tbs_certificate_bytes
        return cert

    def _sct_list(self, precert_tbs: bytes) -> bytes:
        timestamp_ms = int(self.now.timestamp() * 1000)
        issuer_key_hash = key_id(self.ca_key)
        signed = struct.pack("!BBQH", 0, 0, timestamp_ms, 1) + issuer_key_hash
        signed += len(precert_tbs).to_bytes(3, "big") + precert_tbs + struct.pack("!H", 0)
        signature = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = struct.pack("!B", 0) + key_id(self.ct_key) + struct.pack("!QH", timestamp_ms, 0)
        sct += struct.pack("!BBH", 4, 3, len(signature)) + signature
        one = struct.pack("!H", len(sct)) + sct
        return struct.pack("!H", len(one)) + one

    # --- Rekor v1 -----------------------------------------------------------------------------
    def _log_entry(self, kind: str, body: dict) -> dict:
        canonical = rfc8785.dumps(body)
        index = self.log_index
        self.log_index += 1
        integrated = int(self.now.timestamp())
        rekor_id = key_id(self.rekor_key)
        set_payload = rfc8785.dumps(
            {
                "body": b64(canonical),
                "integratedTime": integrated,
                "logID": rekor_id.hex(),
                "logIndex": index,
            }
        )
        root = hashlib.sha256(b"\x00" + canonical).digest()  # a one-leaf tree: the root is the leaf
        note = f"rekor.secureml.test - 1\n1\n{b64(root)}\n"
        note_sig = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        checkpoint = f"{note}\n\u2014 rekor.secureml.test {b64(rekor_id[:4] + note_sig)}\n"
        return {
            "logIndex": str(index),
            "logId": {"keyId": b64(rekor_id)},
            "kindVersion": {"kind": kind, "version": "0.0.1"},
            "integratedTime": str(integrated),
            "inclusionPromise": {
                "signedEntryTimestamp": b64(
                    self.rekor_key.sign(set_payload, ec.ECDSA(hashes.SHA256()))
                )
            },
            "inclusionProof": {
                "logIndex": "0",
                "rootHash": b64(root),
                "treeSize": "1",
                "hashes": [],
                "checkpoint": {"envelope": checkpoint},
            },
            "canonicalizedBody": b64(canonical),
        }

    @staticmethod
    def _material(cert: x509.Certificate, entry: dict) -> dict:
        return {
            "certificate": {"rawBytes": b64(cert.public_bytes(serialization.Encoding.DER))},
            "tlogEntries": [entry],
        }

    # --- signing ------------------------------------------------------------------------------
    def sign_dsse(
        self, statement: dict, *, subject: str, issuer: str, payload_type: str = IN_TOTO
    ) -> bytes:
        """A v0.3 bundle with a DSSE envelope over `statement`, as cosign v3 writes for images."""
        key, cert = self.issue(subject, issuer)
        payload = json.dumps(statement).encode()
        pae = b"DSSEv1 %d %s %d %s" % (
            len(payload_type),
            payload_type.encode(),
            len(payload),
            payload,
        )
        signature = key.sign(pae, ec.ECDSA(hashes.SHA256()))
        envelope = {
            "payload": b64(payload),
            "payloadType": payload_type,
            "signatures": [{"sig": b64(signature)}],
        }
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body = {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": [{"signature": b64(signature), "verifier": b64(pem)}],
            },
        }
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": self._material(cert, self._log_entry("dsse", body)),
            "dsseEnvelope": envelope,
        }
        return json.dumps(bundle).encode()

    def sign_image(
        self,
        repository: str,
        digest_hex: str,
        *,
        subject: str,
        issuer: str,
        predicate_type: str = COSIGN_SIGN_PREDICATE,
    ) -> bytes:
        statement = {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": repository, "digest": {"sha256": digest_hex}}],
            "predicateType": predicate_type,
            "predicate": {},
        }
        return self.sign_dsse(statement, subject=subject, issuer=issuer)

    def sign_blob(self, content: bytes, *, subject: str, issuer: str) -> bytes:
        """A v0.3 message-signature bundle over `content` (cosign sign-blob / sigstore sign)."""
        key, cert = self.issue(subject, issuer)
        digest = hashlib.sha256(content).digest()
        signature = key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        pem = cert.public_bytes(serialization.Encoding.PEM)
        body = {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                "signature": {"content": b64(signature), "publicKey": {"content": b64(pem)}},
            },
        }
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": self._material(cert, self._log_entry("hashedrekord", body)),
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": b64(digest)},
                "signature": b64(signature),
            },
        }
        return json.dumps(bundle).encode()
