"""`secureml compile --attest` and `secureml verify-pipeline`: a signed record of each compile.

One compile of the reference pipeline with image signatures checked (bundles from the tests'
private Sigstore, tests/support/private_sigstore.py) writes a key-signed attestation; each test then
verifies it, or a copy with one thing changed, and expects the named failure. The same statement
signed with a Fulcio-style certificate of that private instance checks the keyless path.
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from typer.testing import CliRunner

from secureml.cli import app
from secureml.compile.attestation import PREDICATE_TYPE, statement_bytes
from secureml.compile.rules import RULES
from secureml.core.image_ref import ImageRef
from secureml.supplychain.dsse_key import load_signing_key, sign_statement, verify_envelope
from secureml.supplychain.image_bundles import bundle_filename
from secureml.supplychain.verifier import SignatureError
from tests.support.json_schemas import check
from tests.support.private_sigstore import PrivateSigstore

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipelines" / "secure_finetune.py"
GH = "https://token.actions.githubusercontent.com"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
COMPILER_CI = "https://github.com/acme/pipelines/.github/workflows/compile.yml@refs/heads/main"
runner = CliRunner()


def _pem_private(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey,
) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_public(
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey,
) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _image() -> ImageRef:
    for line in PIPELINE.read_text().splitlines():
        if line.startswith("IMAGE = "):
            return ImageRef.parse(line.split("=", 1)[1].strip().strip('"'))
    raise AssertionError("IMAGE not found in the reference pipeline")


def _profile(folder: Path, root: Path, *, required: bool) -> Path:
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"] = {
        "required": required,
        "trustedRoot": str(root),
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/acme/"}],
    }
    path = folder / "team-a.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory, pki: PrivateSigstore) -> dict[str, Path]:
    """The reference pipeline compiled with signature checks and a key-signed attestation."""
    folder = tmp_path_factory.mktemp("attest")
    root = pki.write_trusted_root(folder / "trusted_root.json")
    profile = _profile(folder, root, required=True)
    bundles = folder / "bundles"
    bundles.mkdir()
    image = _image()
    (bundles / bundle_filename(image.digest_hex)).write_bytes(
        pki.sign_image(image.name, image.digest_hex, subject=BUILDER, issuer=GH)
    )
    key = ec.generate_private_key(ec.SECP256R1())
    (folder / "attest.pem").write_bytes(_pem_private(key))
    (folder / "attest.pub").write_bytes(_pem_public(key))
    out, attestation = folder / "pipeline.yaml", folder / "pipeline.intoto.sigstore.json"
    result = runner.invoke(
        app,
        [
            "compile",
            str(PIPELINE),
            "--profile",
            str(profile),
            "--bundles",
            str(bundles),
            "-o",
            str(out),
            "--attest",
            str(attestation),
            "--attest-key",
            str(folder / "attest.pem"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {attestation}" in result.output
    return {
        "folder": folder,
        "root": root,
        "profile": profile,
        "out": out,
        "attestation": attestation,
        "key": folder / "attest.pem",
        "pub": folder / "attest.pub",
    }


def _statement(bundle: Path | bytes) -> dict:
    data = bundle.read_bytes() if isinstance(bundle, Path) else bundle
    return json.loads(base64.b64decode(json.loads(data)["dsseEnvelope"]["payload"]))


def _verify(pipeline: Path, attestation: Path, *flags: str) -> tuple[int, str]:
    result = runner.invoke(
        app, ["verify-pipeline", str(pipeline), "--attestation", str(attestation), *flags]
    )
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def _by_key(
    s: dict[str, Path], *flags: str, pipeline: Path | None = None, attestation: Path | None = None
) -> tuple[int, str]:
    return _verify(
        pipeline or s["out"], attestation or s["attestation"], "--key", str(s["pub"]), *flags
    )


def test_the_statement_records_the_compile(compiled):
    statement = _statement(compiled["attestation"])
    check("compile-attestation", statement)
    assert statement["subject"] == [
        {
            "name": "pipeline.yaml",
            "digest": {"sha256": hashlib.sha256(compiled["out"].read_bytes()).hexdigest()},
        }
    ]
    predicate = statement["predicate"]
    assert statement["predicateType"] == PREDICATE_TYPE
    assert predicate["profile"] == {
        "name": "team-a",
        "namespace": "team-a",
        "file": "team-a.yaml",
        "sha256": hashlib.sha256(compiled["profile"].read_bytes()).hexdigest(),
    }
    by_source: dict[str, set[str]] = {}
    for rule in predicate["rules"]:
        assert rule["result"] == "pass"
        by_source.setdefault(rule["source"], set()).add(rule["id"])
    assert by_source["compile"] == set(RULES)
    assert by_source["signature"] == {
        "image.signature-missing",
        "image.signature-invalid",
        "image.signer-untrusted",
    }
    assert any(r.startswith("pss.") for r in by_source["admission"])
    assert any(r.startswith("secureml.") for r in by_source["admission"])
    image = _image()
    assert predicate["images"] == [
        {
            "image": str(image),
            "digest": image.digest,
            "signer": BUILDER,
            "issuer": GH,
            "steps": ["prep", "train", "evaluate"],
        }
    ]
    assert predicate["signaturesChecked"] is True
    assert predicate["compiler"] == {"secureml": version("secureml"), "kfp": version("kfp")}


def test_key_round_trip_with_the_current_profile(compiled):
    code, output = _by_key(compiled, "--profile", str(compiled["profile"]))
    assert code == 0, output
    assert output.startswith(f"verified: {compiled['out']} (sha256:")
    assert "profile team-a (namespace team-a" in output and "matches the current profile" in output
    assert "1 signature-verified, 0 unverified" in output


def test_json_output_names_its_schema(compiled):
    code, output = _by_key(compiled, "--profile", str(compiled["profile"]), "--format", "json")
    assert code == 0, output
    document = json.loads(output)
    check("verify-pipeline", document)
    assert document["profile"]["checked"] is True and "issuer" not in document
    assert document["signer"].startswith("key sha256:")


def test_one_byte_changed_in_the_yaml_is_refused(compiled, tmp_path):
    changed = tmp_path / "pipeline.yaml"
    data = bytearray(compiled["out"].read_bytes())
    data[-2] ^= 0x01
    changed.write_bytes(bytes(data))
    code, output = _by_key(compiled, pipeline=changed)
    assert code == 1
    assert (
        "subject digest mismatch" in output and "the YAML changed after it was compiled" in output
    )


def test_an_edited_statement_is_refused(compiled, tmp_path):
    bundle = json.loads(compiled["attestation"].read_bytes())
    statement = _statement(compiled["attestation"])
    statement["predicate"]["profile"]["sha256"] = "0" * 64  # claim another profile
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(statement_bytes(statement)).decode()
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(bundle))
    code, output = _by_key(compiled, attestation=edited)
    assert code == 1
    assert "signature does not verify" in output and "statement or signature altered" in output


def test_another_profile_is_refused(compiled, tmp_path):
    current = tmp_path / "team-a.yaml"
    current.write_text(compiled["profile"].read_text().replace("maxCompute: 50", "maxCompute: 60"))
    assert current.read_bytes() != compiled["profile"].read_bytes()
    code, output = _by_key(compiled, "--profile", str(current))
    assert code == 1
    assert "profile mismatch: compiled against 'team-a'" in output
    assert f"the current profile {current} is sha256:" in output


def test_a_wrong_key_is_refused_and_the_bundles_key_named(compiled, tmp_path):
    other = tmp_path / "other.pub"
    other.write_bytes(_pem_public(ec.generate_private_key(ec.SECP256R1())))
    code, output = _verify(compiled["out"], compiled["attestation"], "--key", str(other))
    assert code == 1
    assert (
        "bad signature: not by key sha256:" in output and "the bundle names key sha256:" in output
    )


def _signed_statement(compiled: dict[str, Path], tmp_path: Path, change) -> Path:
    statement = _statement(compiled["attestation"])
    change(statement)
    path = tmp_path / "resigned.json"
    path.write_bytes(
        sign_statement(
            statement_bytes(statement), load_signing_key(compiled["key"].read_bytes(), "key")
        )
    )
    return path


def test_a_wrong_predicate_type_is_refused(compiled, tmp_path):
    path = _signed_statement(
        compiled, tmp_path, lambda s: s.update(predicateType="https://slsa.dev/provenance/v1")
    )
    code, output = _by_key(compiled, attestation=path)
    assert code == 1 and "predicate type is 'https://slsa.dev/provenance/v1'" in output


def test_a_rule_that_did_not_pass_is_refused(compiled, tmp_path):
    def fail_one(statement: dict) -> None:
        statement["predicate"]["rules"][0]["result"] = "fail"

    path = _signed_statement(compiled, tmp_path, fail_one)
    code, output = _by_key(compiled, attestation=path)
    assert code == 1 and f"rules not passed: {next(iter(RULES))}=fail" in output


def test_keyless_with_the_private_sigstore(compiled, pki, tmp_path):
    """The statement signed with a Fulcio-style certificate for the compiling CI job, logged in
    the private Rekor: verified by identity against that instance's trusted root."""
    bundle = tmp_path / "keyless.json"
    bundle.write_bytes(
        pki.sign_dsse(_statement(compiled["attestation"]), subject=COMPILER_CI, issuer=GH)
    )
    identity = ["--trusted-root", str(compiled["root"]), "--certificate-oidc-issuer", GH]
    code, output = _verify(
        compiled["out"],
        bundle,
        *identity,
        "--certificate-identity",
        COMPILER_CI,
        "--profile",
        str(compiled["profile"]),
    )
    assert code == 0, output
    assert f"signed by {COMPILER_CI} (issuer {GH})" in output
    code, output = _verify(
        compiled["out"],
        bundle,
        *identity,
        "--certificate-identity-regexp",
        r"^https://github\.com/evil/",
    )
    assert code == 1 and "the attestation's signer is not trusted" in output
    assert f"signed by {COMPILER_CI}" in output
    code, output = _by_key(compiled, attestation=bundle)
    assert code == 1 and "not a key-signed attestation" in output
    code, output = _verify(
        compiled["out"], compiled["attestation"], *identity, "--certificate-identity", COMPILER_CI
    )
    assert code == 1 and "the attestation is signed with a key" in output


def test_keyless_from_another_instance_is_refused(compiled, tmp_path):
    bundle = tmp_path / "other-instance.json"
    bundle.write_bytes(
        PrivateSigstore().sign_dsse(
            _statement(compiled["attestation"]), subject=COMPILER_CI, issuer=GH
        )
    )
    code, output = _verify(
        compiled["out"],
        bundle,
        "--trusted-root",
        str(compiled["root"]),
        "--certificate-identity",
        COMPILER_CI,
        "--certificate-oidc-issuer",
        GH,
    )
    assert code == 1 and "the attestation's signature does not verify" in output


def test_unusable_inputs_are_exit_2(compiled, tmp_path):
    code, output = _by_key(compiled, pipeline=tmp_path / "missing.yaml")
    assert code == 2 and "cannot read pipeline" in output
    code, output = _verify(compiled["out"], compiled["attestation"])
    assert code == 2 and "no trusted signer given" in output
    code, output = _verify(
        compiled["out"], compiled["attestation"], "--key", str(compiled["profile"])
    )
    assert code == 2 and "is not a PEM public key" in output


@pytest.mark.parametrize(
    "make",
    [
        lambda: ec.generate_private_key(ec.SECP384R1()),
        lambda: ed25519.Ed25519PrivateKey.generate(),
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    ],
    ids=["p384", "ed25519", "rsa2048"],
)
def test_every_key_type_signs_and_verifies(make):
    key = make()
    signed = json.loads(sign_statement(b'{"_type":"x"}', load_signing_key(_pem_private(key), "k")))
    assert (
        verify_envelope(signed, _pem_public(key), key_source="k", subject="s", where="w")[1]
        == b'{"_type":"x"}'
    )
    signed["dsseEnvelope"]["payload"] = base64.b64encode(b'{"_type":"y"}').decode()
    with pytest.raises(SignatureError, match="signature does not verify"):
        verify_envelope(signed, _pem_public(key), key_source="k", subject="s", where="w")


def test_an_encrypted_key_needs_its_password(tmp_path, monkeypatch):
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    from secureml.core.errors import InputError

    with pytest.raises(InputError, match="SECUREML_ATTEST_KEY_PASSWORD"):
        load_signing_key(pem, "k.pem")
    monkeypatch.setenv("SECUREML_ATTEST_KEY_PASSWORD", "s3cret")
    assert load_signing_key(pem, "k.pem").fingerprint.startswith("sha256:")


@pytest.fixture
def unsigned_profile(tmp_path: Path, pki: PrivateSigstore) -> Path:
    return _profile(tmp_path, pki.write_trusted_root(tmp_path / "root.json"), required=False)


def _compile(profile: Path, out: Path, *flags: str) -> tuple[int, str]:
    result = runner.invoke(
        app, ["compile", str(PIPELINE), "--profile", str(profile), "-o", str(out), *flags]
    )
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def test_attestation_paths_that_are_inputs_are_refused(compiled, unsigned_profile, tmp_path):
    before = unsigned_profile.read_bytes()
    key = ["--attest-key", str(compiled["key"])]
    out = tmp_path / "p.yaml"
    code, output = _compile(unsigned_profile, out, "--attest", str(unsigned_profile), *key)
    assert code == 2 and f"--attest {unsigned_profile} is the input" in output
    assert unsigned_profile.read_bytes() == before
    out.write_text("old\n")
    code, output = _compile(unsigned_profile, out, "--attest", str(out), *key)
    assert code == 2 and "--attest" in output and out.read_text() == "old\n"
    code, output = _compile(unsigned_profile, out, "--attest", str(compiled["key"]), *key)
    assert code == 2 and compiled["key"].read_bytes().startswith(b"-----BEGIN PRIVATE KEY")
    code, output = _compile(unsigned_profile, out, *key)
    assert code == 2 and "need --attest FILE" in output


def test_without_an_identity_or_key_nothing_is_written(unsigned_profile, tmp_path, monkeypatch):
    """Keyless signing outside CI: no ambient OIDC token, so exit 2 before any file is written."""
    for name in (
        "GITHUB_ACTIONS",
        "GOOGLE_SERVICE_ACCOUNT_NAME",
        "BUILDKITE",
        "GITLAB_CI",
        "CIRCLECI",
    ):
        monkeypatch.delenv(name, raising=False)
    out, attestation = tmp_path / "p.yaml", tmp_path / "p.att.json"
    code, output = _compile(unsigned_profile, out, "--attest", str(attestation))
    assert code == 2 and "no ambient OIDC identity" in output and "--attest-key" in output
    assert not out.exists() and not attestation.exists()


def test_unverified_images_when_signatures_are_off(unsigned_profile, compiled, tmp_path):
    out, attestation = tmp_path / "p.yaml", tmp_path / "p.att.json"
    code, output = _compile(
        unsigned_profile, out, "--attest", str(attestation), "--attest-key", str(compiled["key"])
    )
    assert code == 0, output
    predicate = _statement(attestation)["predicate"]
    assert predicate["signaturesChecked"] is False
    assert [(i["signer"], i["issuer"]) for i in predicate["images"]] == [("unverified", None)]
    assert not any(r["source"] == "signature" for r in predicate["rules"])
    code, output = _by_key(
        compiled, "--profile", str(unsigned_profile), pipeline=out, attestation=attestation
    )
    assert code == 0 and "0 signature-verified, 1 unverified" in output


def test_keyless_signing_in_ci_with_the_private_sigstore(
    unsigned_profile, pki, tmp_path, monkeypatch
):
    """`compile --attest` in a (simulated) GitHub Actions job: sigstore-python's signer takes the
    job's OIDC token, gets a certificate from the private Fulcio and logs the envelope in its
    Rekor; verify-pipeline then trusts the compiling workflow's identity, and only it."""
    from tests.support.sigstore_services import SigstoreServices

    out, attestation = tmp_path / "p.yaml", tmp_path / "p.att.json"
    config = tmp_path / "trust_config.json"
    with SigstoreServices(pki, COMPILER_CI) as services:
        config.write_text(json.dumps(services.client_trust_config()))
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "job-token")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", services.url + "/token")
        code, output = _compile(
            unsigned_profile,
            out,
            "--attest",
            str(attestation),
            "--attest-trust-config",
            str(config),
        )
    assert code == 0, output
    assert services.requests == [
        "GET /token",
        "POST /api/v2/signingCert",
        "POST /api/v1/log/entries",
    ]
    identity = ["--trusted-root", str(tmp_path / "root.json"), "--certificate-oidc-issuer", GH]
    code, output = _verify(
        out,
        attestation,
        *identity,
        "--certificate-identity",
        COMPILER_CI,
        "--profile",
        str(unsigned_profile),
    )
    assert code == 0, output
    assert f"signed by {COMPILER_CI} (issuer {GH})" in output
    code, output = _verify(out, attestation, *identity, "--certificate-identity", BUILDER)
    assert code == 1 and "the attestation's signer is not trusted" in output


def test_compile_json_names_the_attestation(unsigned_profile, compiled, tmp_path):
    out, attestation = tmp_path / "p.yaml", tmp_path / "p.att.json"
    args = ["--profile", str(unsigned_profile), "-o", str(out), "--format", "json"]
    result = runner.invoke(
        app,
        [
            "compile",
            str(PIPELINE),
            *args,
            "--attest",
            str(attestation),
            "--attest-key",
            str(compiled["key"]),
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    check("compile", document)
    assert document["attestation"] == str(attestation) and attestation.is_file()


def test_required_attestations_are_recorded_rules():
    from secureml.compile.attestation import checked_rules
    from secureml.profile.model import TenantProfile

    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["attestations"] = [
        {"type": "https://cosign.sigstore.dev/attestation/vuln/v1", "maxSeverity": "HIGH"},
        {"type": "https://cyclonedx.org/bom"},
    ]
    profile = TenantProfile.from_dict(data)
    rules = checked_rules(profile, {"admissionChecked": False}, signatures=True, image_checks=True)
    recorded = {r["id"] for r in rules if r["source"] == "attestation"}
    assert recorded == {
        "image.attestation-missing",
        "image.attestation-predicate",
        "image.attestation-invalid",
        "image.attestation-untrusted",
        "image.vuln-severity",
    }
    assert {"image.no-launcher", "image.signer-untrusted"} <= {r["id"] for r in rules}
    assert not any(r["source"] == "admission" for r in rules)
