"""`secureml verify-bundle` over every sigstore-conformance case, in file and in digest mode.

Cases ending in `_fail` must fail, all others must verify, except the managed-key cases listed in
docs/sigstore-conformance.md (sigstore-python's verifier has no public-key bundles).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app

from .conftest import BEACON, CONFORMANCE, GITHUB_ISSUER

UNSUPPORTED = {"managed-key-happy-path", "managed-key-and-trusted-root"}  # docs/sigstore-conformance.md
CASES = sorted(p.name for p in CONFORMANCE.iterdir() if p.is_dir()) if CONFORMANCE.is_dir() else []


def protocol_args(case: Path, digest_mode: bool) -> list[str]:
    args = ["verify-bundle", "--bundle", str(case / "bundle.sigstore.json")]
    if (case / "key.pub").exists():
        args += ["--key", str(case / "key.pub")]
    else:
        identity = (case / "identity").read_text().strip() if (case / "identity").exists() else BEACON
        issuer = (case / "issuer").read_text().strip() if (case / "issuer").exists() else GITHUB_ISSUER
        args += ["--certificate-identity", identity, "--certificate-oidc-issuer", issuer]
    if (case / "trusted_root.json").exists():
        args += ["--trusted-root", str(case / "trusted_root.json")]
    artifact = case / "artifact" if (case / "artifact").exists() else CONFORMANCE / "a.txt"
    args.append("sha256:" + hashlib.sha256(artifact.read_bytes()).hexdigest() if digest_mode else str(artifact))
    return args


def test_every_case_is_collected():
    assert len(CASES) == 47


@pytest.mark.parametrize("mode", ["file", "digest"])
@pytest.mark.parametrize("name", CASES)
def test_conformance_case(name, mode):
    case = CONFORMANCE / name
    result = CliRunner().invoke(app, protocol_args(case, mode == "digest"))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if name in UNSUPPORTED:
        assert result.exit_code == 1 and "managed-key (--key) verification is not supported" in result.output
    elif name.endswith("_fail"):
        assert result.exit_code != 0, result.output
        assert "error:" in result.output and "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result.output
        assert result.output.startswith("verified: ")
