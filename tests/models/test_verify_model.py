"""`secureml.supplychain.models.verify_model`: a model folder signed with model-signing 1.x, by a
key and keyless with the tests' private Sigstore, verifies offline; every change refuses it."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.models import MODEL_SIGNING_PREDICATE, ModelTrust, verify_model
from secureml.supplychain.verifier import SignatureError
from tests.support.model_signing import (
    ISSUER,
    SIGNER,
    TRUSTED_REGEXP,
    make_model,
    new_key,
    sign_with_key,
    sign_with_sigstore,
)
from tests.support.private_sigstore import PrivateSigstore


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore()


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[Path, ModelTrust]:
    model = make_model(tmp_path / "bert")
    private, public = new_key(tmp_path)
    sign_with_key(model, private)
    return model, ModelTrust(keys=(public,))


@pytest.fixture
def keyless(tmp_path: Path, pki: PrivateSigstore) -> tuple[Path, ModelTrust]:
    model = make_model(tmp_path / "bert-keyless")
    sign_with_sigstore(model, pki, tmp_path)
    root = pki.write_trusted_root(tmp_path / "trusted_root.json")
    trusted = TrustedIdentity(issuer=ISSUER, subject_regexp=TRUSTED_REGEXP)
    return model, ModelTrust(signers=(trusted,), trusted_root=str(root))


def _refused(model: Path, trust: ModelTrust, kind: str) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        verify_model(model, trust, name="model")
    assert caught.value.kind == kind, caught.value.diagnostics()
    assert (
        caught.value.rule("model")
        == {
            "missing": "model.signature-missing",
            "invalid": "model.signature-invalid",
            "untrusted": "model.signer-untrusted",
        }[kind]
    )
    return caught.value


def test_key_signed_model_verifies_with_its_digest(keyed: tuple[Path, ModelTrust]) -> None:
    model, trust = keyed
    found = verify_model(model, trust, name="model")

    envelope = json.loads((model / "model.sig").read_text())["dsseEnvelope"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicateType"] == MODEL_SIGNING_PREDICATE
    assert found.digest == "sha256:" + statement["subject"][0]["digest"]["sha256"]
    assert (found.method, found.files, found.hash_type) == ("key", 3, "sha256")
    assert found.signer.startswith("sha256:") and found.issuer is None


def test_sigstore_signed_model_verifies_offline_with_the_signer(
    keyless: tuple[Path, ModelTrust],
) -> None:
    model, trust = keyless
    found = verify_model(model, trust, name="model")

    assert (found.method, found.signer, found.issuer) == ("sigstore", SIGNER, ISSUER)


def test_shard_serialization_verifies(tmp_path: Path) -> None:
    model = make_model(tmp_path / "bert")
    private, public = new_key(tmp_path)
    sign_with_key(model, private, shards=True)

    found = verify_model(model, ModelTrust(keys=(public,)))
    assert found.files == 3


@pytest.mark.parametrize("signing", ["keyed", "keyless"])
def test_a_modified_file_is_refused_naming_it(signing: str, request: pytest.FixtureRequest) -> None:
    model, trust = request.getfixturevalue(signing)
    (model / "weights.bin").write_bytes(b"\x00" * 16384)

    error = _refused(model, trust, "invalid")
    assert "does not match its signature" in error.what
    assert error.why == "modified: weights.bin"


def test_an_extra_file_is_refused(keyed: tuple[Path, ModelTrust]) -> None:
    model, trust = keyed
    (model / "config" / "backdoor.py").write_text("import os\n")

    assert _refused(model, trust, "invalid").why == "not signed (extra): config/backdoor.py"


def test_a_removed_file_is_refused(keyed: tuple[Path, ModelTrust]) -> None:
    model, trust = keyed
    (model / "tokenizer.txt").unlink()

    assert _refused(model, trust, "invalid").why == "missing: tokenizer.txt"


def test_an_untrusted_sigstore_signer_is_refused(
    tmp_path: Path, pki: PrivateSigstore, keyless: tuple[Path, ModelTrust]
) -> None:
    model, trust = keyless
    sign_with_sigstore(model, pki, tmp_path, subject="https://github.com/evil/models/x.yml@main")

    error = _refused(model, trust, "untrusted")
    assert "https://github.com/evil/models/x.yml@main" in error.why


def test_an_untrusted_key_is_refused(tmp_path: Path, keyed: tuple[Path, ModelTrust]) -> None:
    model, _ = keyed
    _, other = new_key(tmp_path, "other")

    error = _refused(model, ModelTrust(keys=(other,)), "untrusted")
    assert "no trusted key verifies the signature" in error.why


def test_a_key_signature_with_only_sigstore_signers_trusted_is_refused(
    keyed: tuple[Path, ModelTrust], keyless: tuple[Path, ModelTrust]
) -> None:
    model, _ = keyed
    _, sigstore_trust = keyless

    assert "no model signing keys are trusted" in _refused(model, sigstore_trust, "untrusted").what


def test_a_missing_signature_is_refused(keyed: tuple[Path, ModelTrust]) -> None:
    model, trust = keyed
    (model / "model.sig").unlink()

    error = _refused(model, trust, "missing")
    assert "no signature 'model.sig'" in error.what


def test_a_missing_model_folder_is_refused(tmp_path: Path, keyed: tuple[Path, ModelTrust]) -> None:
    _, trust = keyed
    _refused(tmp_path / "nowhere", trust, "missing")


def test_a_signature_over_something_else_is_refused(
    tmp_path: Path, pki: PrivateSigstore, keyless: tuple[Path, ModelTrust]
) -> None:
    model, trust = keyless
    image_signature = pki.sign_image("ghcr.io/acme/bert", "ab" * 32, subject=SIGNER, issuer=ISSUER)
    (model / "model.sig").write_bytes(image_signature)

    error = _refused(model, trust, "invalid")
    assert "not a model-signing 1.x signature" in error.what


def test_a_linked_model_folder_is_followed_as_the_kernel_does(
    tmp_path: Path, keyed: tuple[Path, ModelTrust]
) -> None:
    """KFP's oci:// model input is a link to /proc/<modelcar pid>/root/models: the link's target
    is used as written (through the /proc magic link), not rewritten by realpath."""
    model, trust = keyed
    link = tmp_path / "oci_registry.example_acme_bert:v1"
    link.mkdir()
    (link / "models").symlink_to(f"/proc/{os.getpid()}/root{model}")

    found = verify_model(link / "models", trust)
    assert found.files == 3 and found.path == str(link / "models")
