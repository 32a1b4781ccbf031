"""Managed-key bundles (`verify-bundle --key`): the real conformance bundles, and variants of them
that each break one link (signature, key, artifact, inclusion proof, promise, log, time window)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import InputError
from secureml.supplychain.managed_key import (
    _check_body,
    _check_signature,
    fingerprint,
    verify_with_key,
)
from secureml.supplychain.verifier import SignatureError
from tests.support.sigstore_fixtures import BEACON, CONFORMANCE, GITHUB_ISSUER

PRODUCTION_CASE = CONFORMANCE / "managed-key-happy-path"  # logged in rekor.sigstore.dev
STAGING_CASE = (
    CONFORMANCE / "managed-key-and-trusted-root"
)  # logged in rekor.sigstage.dev, custom root
A_TXT = CONFORMANCE / "a.txt"


def _bundle(case: Path) -> dict:
    return json.loads((case / "bundle.sigstore.json").read_bytes())


def _key(case: Path) -> bytes:
    return (case / "key.pub").read_bytes()


def _verify(
    document: dict,
    *,
    case: Path = PRODUCTION_CASE,
    artifact: bytes | str | None = None,
    key: bytes | None = None,
    root: str | Path = "production",
):
    return verify_with_key(
        A_TXT.read_bytes() if artifact is None else artifact,
        json.dumps(document).encode(),
        _key(case) if key is None else key,
        root,
    )


def _failure(document: dict, **kwargs) -> SignatureError:
    with pytest.raises(SignatureError) as err:
        _verify(document, **kwargs)
    return err.value


def _b64_flip(text: str, index: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _entry(document: dict) -> dict:
    return document["verificationMaterial"]["tlogEntries"][0]


@pytest.mark.parametrize("digest_mode", [False, True])
def test_real_bundle_verifies_with_its_log_and_time(digest_mode):
    artifact = "sha256:" + hashlib.sha256(A_TXT.read_bytes()).hexdigest() if digest_mode else None
    signed = _verify(_bundle(PRODUCTION_CASE), artifact=artifact)
    assert signed.key_fingerprint == fingerprint(
        serialization.load_pem_public_key(_key(PRODUCTION_CASE))
    )
    assert (signed.log_url, signed.log_index) == ("https://rekor.sigstore.dev", 771488337)
    assert int(signed.integrated_time.timestamp()) == 1766077479


def test_custom_root_bundle_verifies_against_its_root():
    signed = _verify(
        _bundle(STAGING_CASE), case=STAGING_CASE, root=STAGING_CASE / "trusted_root.json"
    )
    assert signed.log_url == "https://rekor.sigstage.dev"


def test_flipped_signature_byte_fails():
    document = _bundle(PRODUCTION_CASE)
    document["messageSignature"]["signature"] = _b64_flip(
        document["messageSignature"]["signature"], -1
    )
    failure = _failure(document)
    assert failure.kind == "invalid" and "signature does not verify" in failure.what
    assert failure.why.startswith("bad signature: not by key sha256:")


def test_wrong_key_fails_and_names_the_bundles_key():
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    pem = other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    failure = _failure(_bundle(PRODUCTION_CASE), key=pem)
    assert "bad signature: not by key " + fingerprint(other) in failure.why
    assert "the bundle names key sha256:4cb32c4837c6dda8" in failure.why


def test_unparseable_key_is_an_input_error():
    with pytest.raises(InputError, match="is not a PEM public key"):
        _verify(_bundle(PRODUCTION_CASE), key=_key(CONFORMANCE / "managed-key-wrong-key_fail"))


@pytest.mark.parametrize("keep_message_digest", [True, False])
def test_wrong_artifact_fails(keep_message_digest):
    document = _bundle(PRODUCTION_CASE)
    if not keep_message_digest:  # then only the signature itself can catch it
        del document["messageSignature"]["messageDigest"]
    failure = _failure(document, artifact=A_TXT.read_bytes() + b"x")
    expected = (
        "wrong digest: the bundle signs sha256:a0cfc712" if keep_message_digest else "bad signature"
    )
    assert failure.why.startswith(expected)


def test_tampered_inclusion_proof_fails():
    document = _bundle(PRODUCTION_CASE)
    proof = _entry(document)["inclusionProof"]
    proof["hashes"][3] = _b64_flip(proof["hashes"][3], 0)
    failure = _failure(document)
    assert failure.what.endswith("log entry is not proven")
    assert "https://rekor.sigstore.dev: inclusion proof contains invalid root hash" in failure.why


def test_forged_checkpoint_signature_fails():
    document = _bundle(PRODUCTION_CASE)
    checkpoint = _entry(document)["inclusionProof"]["checkpoint"]
    note, _, signature_line = checkpoint["envelope"].rstrip("\n").rpartition("\n")
    dash, name, signature = signature_line.split(" ")
    checkpoint["envelope"] = (
        f"{note}\n{dash} {name} {_b64_flip(signature, -1)}\n"  # keeps the 4-byte key hint
    )
    assert "https://rekor.sigstore.dev: checkpoint: invalid signature" in _failure(document).why


def test_checkpoint_of_another_log_fails():
    document = _bundle(PRODUCTION_CASE)
    _entry(document)["inclusionProof"]["checkpoint"] = _entry(_bundle(STAGING_CASE))[
        "inclusionProof"
    ]["checkpoint"]
    assert "checkpoint: Signature not found for log ID c0d23d6a" in _failure(document).why


def test_tampered_signed_entry_timestamp_fails():
    document = _bundle(PRODUCTION_CASE)
    promise = _entry(document)["inclusionPromise"]
    promise["signedEntryTimestamp"] = _b64_flip(promise["signedEntryTimestamp"], -1)
    assert "SET: invalid inclusion promise" in _failure(document).why


def test_shifted_integrated_time_breaks_the_promise():
    document = _bundle(PRODUCTION_CASE)
    _entry(document)["integratedTime"] = str(int(_entry(document)["integratedTime"]) + 1)
    assert "SET: invalid inclusion promise" in _failure(document).why


def test_missing_inclusion_promise_fails():
    document = _bundle(PRODUCTION_CASE)
    del _entry(document)["inclusionPromise"]
    assert _failure(document).what.endswith("log entry time is not proven")


def test_log_absent_from_the_trusted_root_is_untrusted():
    failure = _failure(_bundle(PRODUCTION_CASE), root=STAGING_CASE / "trusted_root.json")
    assert failure.kind == "untrusted"
    assert "log id wNI9atQGlz+VWfO6LRygH4QUfY/8W4RFwiT5i5WRgB0= is not a Rekor log" in failure.why


def _root_with_window(tmp_path: Path, start: str, end: str | None) -> Path:
    root = json.loads((STAGING_CASE / "trusted_root.json").read_bytes())
    for tlog in root["tlogs"]:
        tlog["publicKey"]["validFor"] = {"start": start} | ({"end": end} if end else {})
    path = tmp_path / "trusted_root.json"
    path.write_text(json.dumps(root))
    return path


@pytest.mark.parametrize(
    ("start", "end", "verifies"),
    [
        ("2026-01-07T18:36:05Z", "2026-01-07T18:36:05Z", True),  # both ends inclusive
        ("2021-01-12T11:53:27Z", "2026-01-07T18:36:04Z", False),  # the key expired a second before
        ("2026-01-07T18:36:06Z", None, False),  # the key was not yet valid
    ],
)
def test_integrated_time_must_lie_in_the_log_keys_window(tmp_path, start, end, verifies):
    root = _root_with_window(tmp_path, start, end)
    document = _bundle(STAGING_CASE)
    if verifies:
        assert (
            _verify(document, case=STAGING_CASE, root=root).log_url == "https://rekor.sigstage.dev"
        )
    else:
        failure = _failure(document, case=STAGING_CASE, root=root)
        assert failure.what.endswith("log entry outside the log key's validity")


def test_dsse_bundle_with_key_is_refused():
    document = _bundle(PRODUCTION_CASE)
    document["dsseEnvelope"] = {
        "payload": "",
        "payloadType": "application/vnd.in-toto+json",
        "signatures": [],
    }
    del document["messageSignature"]
    assert "not DSSE envelopes" in _failure(document).why


def test_certificate_bundle_is_not_a_managed_key_bundle():
    document = json.loads(
        (CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json").read_bytes()
    )
    assert _failure(document).what.endswith("not a managed-key bundle")


def _fail(what: str, why: str, kind: str = "invalid") -> SignatureError:
    return SignatureError(kind, what, why=why)  # type: ignore[arg-type]


def test_logged_body_must_record_this_signature_key_and_digest():
    document = _bundle(PRODUCTION_CASE)
    body = base64.b64decode(_entry(document)["canonicalizedBody"])
    key = serialization.load_pem_public_key(_key(PRODUCTION_CASE))
    signature = base64.b64decode(document["messageSignature"]["signature"])
    digest = hashlib.sha256(A_TXT.read_bytes()).digest()
    _check_body(body, key, signature, digest, _fail)  # the real entry matches
    other_key = ec.generate_private_key(ec.SECP256R1()).public_key()
    for args, reason in [
        ((key, signature + b"\0", digest), "the logged signature differs"),
        ((other_key, signature, digest), "the logged key is sha256:4cb32c48"),
        (
            (key, signature, hashlib.sha256(b"other").digest()),
            "the logged artifact is sha256:a0cfc712",
        ),
    ]:
        with pytest.raises(SignatureError, match=reason):
            _check_body(body, *args, _fail)


def _ecdsa(curve: ec.EllipticCurve):
    private = ec.generate_private_key(curve)
    return private.public_key(), lambda digest, raw: private.sign(
        digest, ec.ECDSA(Prehashed(hashes.SHA256()))
    )


def _rsa():
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return private.public_key(), lambda digest, raw: private.sign(
        digest, padding.PKCS1v15(), Prehashed(hashes.SHA256())
    )


def _ed25519():
    private = ed25519.Ed25519PrivateKey.generate()
    return private.public_key(), lambda digest, raw: private.sign(raw)


@pytest.mark.parametrize(
    "make",
    [lambda: _ecdsa(ec.SECP256R1()), lambda: _ecdsa(ec.SECP384R1()), _rsa, _ed25519],
    ids=["p256", "p384", "rsa", "ed25519"],
)
def test_each_key_type_verifies_its_own_scheme_only(make):
    key, sign = make()
    raw = b"artifact"
    digest = hashlib.sha256(raw).digest()
    signature = sign(digest, raw)
    _check_signature(key, signature, digest, raw, None, None, _fail)
    with pytest.raises(SignatureError, match="bad signature"):
        _check_signature(
            key, signature, hashlib.sha256(b"other").digest(), b"other", None, None, _fail
        )


def test_ed25519_needs_the_artifact_not_its_digest():
    key, sign = _ed25519()
    signature = sign(b"", b"artifact")
    with pytest.raises(SignatureError, match="pass the file instead"):
        _check_signature(
            key, signature, hashlib.sha256(b"artifact").digest(), None, None, None, _fail
        )


def test_cli_refuses_key_with_identity_flags():
    result = CliRunner().invoke(
        app,
        [
            "verify-bundle",
            "--bundle",
            str(PRODUCTION_CASE / "bundle.sigstore.json"),
            "--key",
            str(PRODUCTION_CASE / "key.pub"),
            "--certificate-identity",
            BEACON,
            "--certificate-oidc-issuer",
            GITHUB_ISSUER,
            str(A_TXT),
        ],
    )
    assert result.exit_code == 2 and "--key and --certificate-identity" in result.output
