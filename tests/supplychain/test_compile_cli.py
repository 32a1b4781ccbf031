"""`secureml compile --bundles/--require-signed-profile` end to end on the reference pipeline, with
bundles from the test Sigstore instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.image_ref import ImageRef
from secureml.supplychain.image_bundles import bundle_filename
from tests.support.paths import REPO
from tests.support.private_sigstore import PrivateSigstore

GH = "https://token.actions.githubusercontent.com"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
PIPELINE = REPO / "pipelines" / "secure_finetune.py"


def pipeline_image() -> ImageRef:
    for line in PIPELINE.read_text().splitlines():
        if line.startswith("IMAGE = "):
            return ImageRef.parse(line.split("=", 1)[1].strip().strip('"'))
    raise AssertionError("IMAGE not found in the reference pipeline")


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore()


@pytest.fixture
def setup(tmp_path: Path, pki: PrivateSigstore) -> dict[str, Path]:
    root = pki.write_trusted_root(tmp_path / "trusted_root.json")
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"] = {
        "required": True,
        "trustedRoot": "trusted_root.json",  # relative to the profile
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/acme/"}],
    }
    profile = tmp_path / "team-a.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    return {
        "root": root,
        "profile": profile,
        "bundles": bundles,
        "out": tmp_path / "out.yaml",
        "report": tmp_path / "r.json",
    }


def compile_args(s: dict[str, Path], *extra: str) -> list[str]:
    return [
        "compile",
        str(PIPELINE),
        "--profile",
        str(s["profile"]),
        "-o",
        str(s["out"]),
        "--report",
        str(s["report"]),
        "--bundles",
        str(s["bundles"]),
        *extra,
    ]


def test_signed_images_compile_and_the_report_names_the_signer(setup, pki):
    image = pipeline_image()
    (setup["bundles"] / bundle_filename(image.digest_hex)).write_bytes(
        pki.sign_image(image.name, image.digest_hex, subject=BUILDER, issuer=GH)
    )
    result = CliRunner().invoke(app, compile_args(setup))
    assert result.exit_code == 0, result.output
    report = json.loads(setup["report"].read_text())
    signatures = [step.get("signature") for step in report["steps"]]
    assert signatures and all(s == {"signer": BUILDER, "issuer": GH} for s in signatures)


def test_missing_and_untrusted_signatures_are_violations(setup, pki):
    result = CliRunner().invoke(app, compile_args(setup))
    assert result.exit_code == 1
    assert "image.signature-missing" in result.output
    image = pipeline_image()
    (setup["bundles"] / bundle_filename(image.digest_hex)).write_bytes(
        pki.sign_image(
            image.name,
            image.digest_hex,
            subject="https://github.com/evil/x/.github/workflows/b.yml@refs/heads/main",
            issuer=GH,
        )
    )
    result = CliRunner().invoke(app, compile_args(setup))
    assert result.exit_code == 1 and "image.signer-untrusted" in result.output


def test_require_signed_profile_detects_a_loosened_profile(setup, pki):
    image = pipeline_image()
    (setup["bundles"] / bundle_filename(image.digest_hex)).write_bytes(
        pki.sign_image(image.name, image.digest_hex, subject=BUILDER, issuer=GH)
    )
    profile = setup["profile"]
    (profile.parent / (profile.name + ".sigstore.json")).write_bytes(
        pki.sign_blob(
            profile.read_bytes(),
            subject="platform@acme.example",
            issuer="https://accounts.google.com",
        )
    )
    signed_args = compile_args(
        setup,
        "--require-signed-profile",
        "--trusted-root",
        str(setup["root"]),
        "--certificate-identity",
        "platform@acme.example",
        "--certificate-oidc-issuer",
        "https://accounts.google.com",
    )
    ok = CliRunner().invoke(app, signed_args)
    assert ok.exit_code == 0, ok.output
    profile.write_text(profile.read_text().replace("maxCompute: 50", "maxCompute: 100"))
    loosened = CliRunner().invoke(app, signed_args)
    assert loosened.exit_code == 1
    assert "may have been changed after it was signed" in loosened.output


def test_a_registry_that_does_not_answer_is_one_environment_error(setup, tmp_path):
    """--fetch-bundles against a registry that is down: exit 2 with one error, not an
    image.signature-missing violation per step; nothing written."""
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE.read_text().replace("ghcr.io/acme/", "127.0.0.1:1/acme/"))
    data = yaml.safe_load(setup["profile"].read_text())
    data["spec"]["images"]["allowedRegistries"] = ["127.0.0.1:1/acme/"]
    setup["profile"].write_text(yaml.safe_dump(data, sort_keys=False))
    args = compile_args(setup, "--fetch-bundles")
    args[1] = str(pipeline)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.count("error: cannot fetch Sigstore bundles") == 1
    assert "did not answer" in result.output and "signature-missing" not in result.output
    assert not setup["out"].exists() and not setup["report"].exists()


def test_check_images_against_a_registry_that_does_not_answer(setup, tmp_path):
    """--check-images (rule image.no-launcher) reads each step image from its registry: one
    that does not answer is one environment error (exit 2), not a violation per step."""
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(PIPELINE.read_text().replace("ghcr.io/acme/", "127.0.0.1:1/acme/"))
    data = yaml.safe_load(setup["profile"].read_text())
    data["spec"]["images"]["allowedRegistries"] = ["127.0.0.1:1/acme/"]
    data["spec"]["images"]["signatures"]["required"] = False
    setup["profile"].write_text(yaml.safe_dump(data, sort_keys=False))
    args = compile_args(setup, "--check-images")
    args[1] = str(pipeline)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.count("error: cannot read 127.0.0.1:1/acme/") == 1, result.output
    assert "image.no-launcher" not in result.output
    assert not setup["out"].exists() and not setup["report"].exists()
