"""DSSE bundles with a Rekor v1 `intoto` 0.0.2 entry (secureml/supplychain/intoto_entry.py).

sigstore-python refuses them; secureml verifies them with every check sigstore-python makes plus the
entry-body check. The real bundle is sigstore-conformance's `intoto-with-custom-trust-root`
(vendored in conformance_upstream/); every variant that breaks one link must still fail.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.intoto_entry import IntotoEntryError, _check_body, log_entry_kind
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.sigstore_fixtures import BEACON, GITHUB_ISSUER

CASE = Path(__file__).parent / "conformance_upstream" / "intoto-with-custom-trust-root"
ARTIFACT = (CASE / "artifact").read_bytes()
DOCUMENT: dict[str, Any] = json.loads((CASE / "bundle.sigstore.json").read_text())
TRUSTED = [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]


def verify(document: dict[str, Any], artifact: bytes | str = ARTIFACT, who=TRUSTED):
    verifier = SignatureVerifier(CASE / "trusted_root.json")
    return verifier.verify_artifact(artifact, json.dumps(document).encode(), who)


def flip(text: str, at: int = 10) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[at] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def test_the_real_bundle_verifies_in_file_and_digest_mode() -> None:
    assert log_entry_kind(DOCUMENT) == ("intoto", "0.0.2")
    for artifact in (ARTIFACT, "sha256:" + hashlib.sha256(ARTIFACT).hexdigest()):
        signed = verify(DOCUMENT, artifact)
        assert (signed.kind, signed.signer, signed.issuer) == ("dsse", BEACON, GITHUB_ISSUER)


def test_another_artifact_is_refused() -> None:
    with pytest.raises(SignatureError, match="wrong digest") as err:
        verify(DOCUMENT, b"not the subject")
    assert err.value.kind == "invalid"


def test_a_wrong_identity_is_refused() -> None:
    other = [TrustedIdentity(issuer=GITHUB_ISSUER, subject="https://github.com/evil/x")]
    with pytest.raises(SignatureError) as err:
        verify(DOCUMENT, who=other)
    assert err.value.kind == "untrusted"
    wrong_issuer = [TrustedIdentity(issuer="https://accounts.google.com", subject=BEACON)]
    with pytest.raises(SignatureError) as err:
        verify(DOCUMENT, who=wrong_issuer)
    assert err.value.kind == "untrusted"


def _mutated(path: tuple[str | int, ...], change: Any) -> dict[str, Any]:
    document = copy.deepcopy(DOCUMENT)
    node: Any = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = change(node[path[-1]])
    return document


ENTRY = ("verificationMaterial", "tlogEntries", 0)
BROKEN = {
    "flipped DSSE signature": (("dsseEnvelope", "signatures", 0, "sig"), flip),
    "altered payload": (
        ("dsseEnvelope", "payload"),
        lambda p: base64.b64encode(base64.b64decode(p).replace(b"sha256", b"sha512")).decode(),
    ),
    "flipped log body": ((*ENTRY, "canonicalizedBody"), lambda b: flip(b, 40)),
    "flipped signed entry timestamp": (
        (*ENTRY, "inclusionPromise", "signedEntryTimestamp"),
        flip,
    ),
    "shifted integrated time": ((*ENTRY, "integratedTime"), lambda t: str(int(t) + 1)),
    "flipped RFC 3161 timestamp": (
        ("verificationMaterial", "timestampVerificationData", "rfc3161Timestamps", 0),
        lambda ts: {"signedTimestamp": flip(ts["signedTimestamp"], 200)},
    ),
    "body labelled dsse": ((*ENTRY, "kindVersion"), lambda _: {"kind": "dsse", "version": "0.0.1"}),
    "flipped certificate": (
        ("verificationMaterial", "x509CertificateChain", "certificates", 0, "rawBytes"),
        lambda c: flip(c, 300),
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_link_fails(name: str) -> None:
    path, change = BROKEN[name]
    with pytest.raises(SignatureError) as err:
        verify(_mutated(path, change))
    assert err.value.kind == "invalid", err.value


# The body check on its own: a changed body fails the log's signatures first, so each mismatch is
# given to _check_body directly, against the real envelope.
BODY = json.loads(
    base64.b64decode(DOCUMENT["verificationMaterial"]["tlogEntries"][0]["canonicalizedBody"])
)
SIGNATURE = base64.b64decode(DOCUMENT["dsseEnvelope"]["signatures"][0]["sig"])
PAYLOAD = base64.b64decode(DOCUMENT["dsseEnvelope"]["payload"])
CERT_DER = base64.b64decode(
    DOCUMENT["verificationMaterial"]["x509CertificateChain"]["certificates"][0]["rawBytes"]
)


def check(body: Any, **overrides: Any) -> None:
    given = {
        "signature": SIGNATURE,
        "certificate_der": CERT_DER,
        "payload_type": DOCUMENT["dsseEnvelope"]["payloadType"],
        "payload": PAYLOAD,
    } | overrides
    _check_body(body, **given)


def _body(change: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    change(body)
    return body


def test_the_real_body_matches() -> None:
    check(BODY)


BODY_MISMATCHES = {
    "another kind": (lambda b: b.update(kind="dsse"), "not an intoto 0.0.2"),
    "another version": (lambda b: b.update(apiVersion="0.0.1"), "not an intoto 0.0.2"),
    "two signatures": (
        lambda b: b["spec"]["content"]["envelope"]["signatures"].append(
            b["spec"]["content"]["envelope"]["signatures"][0]
        ),
        "exactly one signature",
    ),
    "another signature": (
        lambda b: b["spec"]["content"]["envelope"]["signatures"][0].update(
            sig=base64.b64encode(base64.b64encode(b"other").replace(b"=", b"")).decode()
        ),
        "not the envelope's signature",
    ),
    "signature encoded once": (
        lambda b: b["spec"]["content"]["envelope"]["signatures"][0].update(
            sig=base64.b64encode(SIGNATURE).decode()
        ),
        "not the envelope's signature",
    ),
    "no public key": (
        lambda b: b["spec"]["content"]["envelope"]["signatures"][0].pop("publicKey"),
        "not a certificate",
    ),
    "another payload type": (
        lambda b: b["spec"]["content"]["envelope"].update(payloadType="text/plain"),
        "payload type",
    ),
    "another payload hash": (
        lambda b: b["spec"]["content"]["payloadHash"].update(value="00" * 32),
        "payload hash",
    ),
    "another hash algorithm": (
        lambda b: b["spec"]["content"]["payloadHash"].update(algorithm="sha512"),
        "payload hash",
    ),
}


@pytest.mark.parametrize("name", sorted(BODY_MISMATCHES))
def test_a_body_that_is_not_this_envelope_is_refused(name: str) -> None:
    change, reason = BODY_MISMATCHES[name]
    with pytest.raises(IntotoEntryError, match=reason):
        check(_body(change))


def test_a_body_naming_another_certificate_is_refused() -> None:
    with pytest.raises(IntotoEntryError, match="not the bundle's signing certificate"):
        check(BODY, certificate_der=CERT_DER[:-1] + bytes([CERT_DER[-1] ^ 1]))
