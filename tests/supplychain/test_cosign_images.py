"""Cosign v3 image bundles and signed profiles, signed by the test Sigstore instance (tests/support/private_sigstore.py) and
verified by sigstore-python's unchanged verifier; the CLI commands end to end."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.supplychain.compile import verify_images_for_compile
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.image_bundles import bundle_filename
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.json_schemas import check as check_schema
from tests.support.oci_server import OciServer
from tests.support.paths import REPO
from tests.support.private_sigstore import PrivateSigstore

GH = "https://token.actions.githubusercontent.com"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
STRANGER = "https://github.com/evil/fork/.github/workflows/build.yml@refs/heads/main"
DIGEST = "1f" * 32
OTHER = "2e" * 32
ACME = [TrustedIdentity(issuer=GH, subject_regexp=r"^https://github\.com/acme/")]


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore()


@pytest.fixture(scope="module")
def root(pki, tmp_path_factory) -> Path:
    return pki.write_trusted_root(tmp_path_factory.mktemp("root") / "trusted_root.json")


@pytest.fixture(scope="module")
def verifier(root) -> SignatureVerifier:
    return SignatureVerifier(root)


@pytest.fixture(scope="module")
def image_bundle(pki) -> bytes:
    return pki.sign_image("ghcr.io/acme/train", DIGEST, subject=BUILDER, issuer=GH)


def test_cosign_v3_bundle_verifies(verifier, image_bundle):
    signed = verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", image_bundle, ACME)
    assert (signed.signer, signed.issuer, signed.kind, signed.predicate_type) == (
        BUILDER,
        GH,
        "dsse",
        "https://sigstore.dev/cosign/sign/v1",
    )


def test_wrong_image_digest(verifier, image_bundle):
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{OTHER}", image_bundle, ACME)
    assert err.value.rule() == "image.signature-invalid"
    assert f"subjects are sha256:{DIGEST}, not sha256:{OTHER}" in err.value.why


def test_wrong_predicate_type(pki, verifier):
    bundle = pki.sign_image(
        "ghcr.io/acme/train",
        DIGEST,
        subject=BUILDER,
        issuer=GH,
        predicate_type="https://slsa.dev/provenance/v1",
    )
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", bundle, ACME)
    assert "wrong predicate type 'https://slsa.dev/provenance/v1'" in err.value.why


def test_dsse_payload_that_is_not_in_toto(pki, verifier):
    bundle = pki.sign_dsse(
        {"hello": "world"}, subject=BUILDER, issuer=GH, payload_type="text/plain"
    )
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", bundle, ACME)
    assert "DSSE payload type is 'text/plain'" in err.value.why


def test_untrusted_signer(pki, verifier):
    bundle = pki.sign_image("ghcr.io/acme/train", DIGEST, subject=STRANGER, issuer=GH)
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", bundle, ACME)
    assert err.value.rule() == "image.signer-untrusted" and STRANGER in err.value.why


def test_payload_swapped_after_signing(pki, verifier, image_bundle):
    document = json.loads(image_bundle)
    statement = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
    statement["subject"][0]["digest"]["sha256"] = OTHER
    document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(
            f"ghcr.io/acme/train@sha256:{OTHER}", json.dumps(document).encode(), ACME
        )
    assert err.value.kind == "invalid" and "Sigstore verification failed" in err.value.why


def test_bundle_from_another_instance_or_production_fails(verifier):
    stranger_bundle = PrivateSigstore().sign_image(
        "ghcr.io/acme/train", DIGEST, subject=BUILDER, issuer=GH
    )
    with pytest.raises(SignatureError) as err:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", stranger_bundle, ACME)
    assert err.value.kind == "invalid"
    with pytest.raises(SignatureError):
        SignatureVerifier("production").verify_image(
            f"ghcr.io/acme/train@sha256:{DIGEST}", stranger_bundle, ACME
        )


def write_profile(path: Path, root: Path, **images: object) -> Path:
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"] = {
        "required": True,
        "trustedRoot": str(root),
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/acme/"}],
    }
    data["spec"]["images"].update(images)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_verify_image_cli_with_profile_and_relative_root(tmp_path, root, image_bundle):
    (tmp_path / "roots").mkdir()
    (tmp_path / "roots" / "tr.json").write_bytes(root.read_bytes())
    profile = write_profile(
        tmp_path / "team-a.yaml", Path("roots/tr.json")
    )  # relative to the profile
    bundle = tmp_path / bundle_filename(DIGEST)
    bundle.write_bytes(image_bundle)
    result = CliRunner().invoke(
        app,
        [
            "verify-image",
            f"ghcr.io/acme/train@sha256:{DIGEST}",
            "--bundle",
            str(bundle),
            "--profile",
            str(profile),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        f"verified: ghcr.io/acme/train@sha256:{DIGEST} signed by {BUILDER} (issuer {GH}); cosign v3 DSSE"
        in result.output
    )


def test_verify_image_cli_with_flags_and_failures(tmp_path, root, image_bundle):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(image_bundle)
    base = [
        "verify-image",
        "--bundle",
        str(bundle),
        "--trusted-root",
        str(root),
        "--certificate-oidc-issuer",
        GH,
    ]
    ok = CliRunner().invoke(
        app, [*base, f"ghcr.io/acme/train@sha256:{DIGEST}", "--certificate-identity", BUILDER]
    )
    assert ok.exit_code == 0, ok.output
    as_json = CliRunner().invoke(
        app,
        [*base, f"ghcr.io/acme/train@sha256:{DIGEST}", "--certificate-identity", BUILDER]
        + ["--format", "json"],
    )
    assert as_json.exit_code == 0, as_json.output
    check_schema("verify", json.loads(as_json.stdout))
    assert json.loads(as_json.stdout)["signer"] == BUILDER
    wrong_id = CliRunner().invoke(
        app, [*base, f"ghcr.io/acme/train@sha256:{DIGEST}", "--certificate-identity", STRANGER]
    )
    assert wrong_id.exit_code == 1 and "signer is not trusted" in wrong_id.output
    wrong_digest = CliRunner().invoke(
        app, [*base, f"ghcr.io/acme/train@sha256:{OTHER}", "--certificate-identity", BUILDER]
    )
    assert wrong_digest.exit_code == 1 and "wrong digest" in wrong_digest.output
    tag = CliRunner().invoke(
        app, [*base, "ghcr.io/acme/train:v1", "--certificate-identity", BUILDER]
    )
    assert tag.exit_code == 1 and "not pinned by digest" in tag.output
    no_issuer = CliRunner().invoke(
        app,
        [
            "verify-image",
            f"ghcr.io/acme/train@sha256:{DIGEST}",
            "--bundle",
            str(bundle),
            "--certificate-identity",
            BUILDER,
        ],
    )
    assert no_issuer.exit_code == 2 and "--certificate-oidc-issuer is missing" in no_issuer.output
    for result in (wrong_id, wrong_digest, tag, no_issuer):
        assert "Traceback" not in result.output


def test_verify_image_cli_fetches_from_registry(root, image_bundle):
    with OciServer() as registry:
        registry.attach_bundle("acme/train", f"sha256:{DIGEST}", image_bundle)
        result = CliRunner().invoke(
            app,
            [
                "verify-image",
                f"{registry.host}/acme/train@sha256:{DIGEST}",
                "--fetch",
                "--trusted-root",
                str(root),
                "--certificate-identity-regexp",
                "^https://github\\.com/acme/",
                "--certificate-oidc-issuer",
                GH,
            ],
        )
    assert result.exit_code == 0, result.output
    assert "(referrers API)" in result.output


def test_compile_integration_with_cosign_bundles(tmp_path, pki, root, image_bundle):
    (tmp_path / bundle_filename(DIGEST)).write_bytes(image_bundle)
    (tmp_path / bundle_filename(OTHER)).write_bytes(
        pki.sign_image("ghcr.io/acme/eval", OTHER, subject=STRANGER, issuer=GH)
    )
    from secureml.profile.model import load_profile

    profile = load_profile(write_profile(tmp_path / "p.yaml", root))
    train, evaluate = verify_images_for_compile(
        [
            ("train", f"ghcr.io/acme/train@sha256:{DIGEST}"),
            ("eval", f"ghcr.io/acme/eval@sha256:{OTHER}"),
        ],
        profile,
        tmp_path,
    )
    assert (train.verified, train.signer, train.issuer, train.kind) == (True, BUILDER, GH, "dsse")
    assert (evaluate.verified, evaluate.rule) == (False, "image.signer-untrusted")


def test_signed_profile_and_a_loosened_copy(tmp_path, pki, root):
    profile = write_profile(tmp_path / "team-a.yaml", root)
    bundle = tmp_path / "team-a.yaml.sigstore.json"
    bundle.write_bytes(
        pki.sign_blob(
            profile.read_bytes(),
            subject="platform@acme.example",
            issuer="https://accounts.google.com",
        )
    )
    args = [
        "profile",
        "verify",
        str(profile),
        "--trusted-root",
        str(root),
        "--certificate-identity",
        "platform@acme.example",
        "--certificate-oidc-issuer",
        "https://accounts.google.com",
    ]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    ok_json = CliRunner().invoke(app, [*args, "--format", "json"])
    check_schema("verify", json.loads(ok_json.stdout))
    assert (
        "signed by platform@acme.example (issuer https://accounts.google.com); message signature"
        in ok.output
    )
    # A tenant loosens its own copy: more compute for time-sliced steps.
    profile.write_text(profile.read_text().replace("maxCompute: 50", "maxCompute: 100"))
    loosened = CliRunner().invoke(app, args)
    assert loosened.exit_code == 1
    assert "may have been changed after it was signed" in loosened.output
    as_json = CliRunner().invoke(app, [*args, "--format", "json"])
    assert as_json.exit_code == 1 and not as_json.stdout.strip()  # an error, not a document
    bundle.unlink()
    unsigned = CliRunner().invoke(app, args)
    assert unsigned.exit_code == 1 and "has no signature bundle" in unsigned.output
    # the fix names this command's own flag for the bundle (`--bundle`, not compile's)
    assert "or pass --bundle" in unsigned.output and "--profile-bundle" not in unsigned.output
