"""The real Sigstore material in ../shared/fixtures/sigstore (skipped when absent), and the
sigstore-conformance suite's way of calling a verifier."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support.paths import FIXTURES

SIGSTORE = FIXTURES / "sigstore"
CONFORMANCE = SIGSTORE / "conformance"
ASSETS = SIGSTORE / "sigstore-python-assets"

# Defaults of the conformance suite (its README / cli_protocol.md).
BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_OAUTH = "https://github.com/login/oauth"  # issuer of the staging assets' e-mail identities


def require_fixtures() -> None:
    if not CONFORMANCE.is_dir() or not ASSETS.is_dir():
        pytest.skip(f"Sigstore fixtures not found at {SIGSTORE} (checkout without shared/)")


def protocol_args(case: Path, digest_mode: bool) -> list[str]:
    args = ["verify-bundle", "--bundle", str(case / "bundle.sigstore.json")]
    if (case / "key.pub").exists():
        args += ["--key", str(case / "key.pub")]
    else:
        identity = (
            (case / "identity").read_text().strip() if (case / "identity").exists() else BEACON
        )
        issuer = (
            (case / "issuer").read_text().strip() if (case / "issuer").exists() else GITHUB_ISSUER
        )
        args += ["--certificate-identity", identity, "--certificate-oidc-issuer", issuer]
    if (case / "trusted_root.json").exists():
        args += ["--trusted-root", str(case / "trusted_root.json")]
    artifact = case / "artifact" if (case / "artifact").exists() else case.parent / "a.txt"
    args.append(
        "sha256:" + hashlib.sha256(artifact.read_bytes()).hexdigest()
        if digest_mode
        else str(artifact)
    )
    return args
