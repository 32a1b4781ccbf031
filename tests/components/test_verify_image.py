"""The image-verification component under kfp.local, with real Sigstore bundles (offline)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from secureml.components import verify_image_op

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT.parent / "shared" / "fixtures" / "sigstore" / "conformance"
HAPPY = CONFORMANCE / "happy-path-v0.3-new-mediaType"
BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"

pytestmark = pytest.mark.skipif(
    not HAPPY.is_dir(),
    reason=f"Sigstore fixtures not found at {CONFORMANCE} (checkout without shared/)",
)


def _run(tmp_path: Path, image: str, subject: str) -> object:
    """A two-step pipeline: import the bundle file as an artifact, verify the image with it."""
    from kfp import dsl, local

    verify = verify_image_op(image="python:3.11")

    @dsl.pipeline(name="verify")
    def check():
        bundle = dsl.importer(
            artifact_uri=str(HAPPY / "bundle.sigstore.json"), artifact_class=dsl.Artifact
        )
        verify(image=image, bundle=bundle.output, issuer=GITHUB_ISSUER, subject=subject)

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    return check()


def test_a_signed_image_verifies_and_names_its_signer(tmp_path: Path) -> None:
    digest = hashlib.sha256((CONFORMANCE / "a.txt").read_bytes()).hexdigest()
    _run(tmp_path, f"ghcr.io/acme/eval@sha256:{digest}", BEACON)
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "root").rglob("verification")]
    assert record["image"] == f"ghcr.io/acme/eval@sha256:{digest}"
    assert record["signer"] == BEACON
    assert record["issuer"] == GITHUB_ISSUER and record["kind"] == "message-signature"


def test_an_untrusted_signer_fails_the_step(tmp_path: Path) -> None:
    digest = hashlib.sha256((CONFORMANCE / "a.txt").read_bytes()).hexdigest()
    with pytest.raises(RuntimeError, match="verify-image"):
        _run(tmp_path, f"ghcr.io/acme/eval@sha256:{digest}", "https://github.com/acme/other")
    assert not list((tmp_path / "root").rglob("verification"))
