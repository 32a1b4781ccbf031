"""Paths to the real Sigstore material in ../shared/fixtures/sigstore (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIGSTORE = REPO.parent / "shared" / "fixtures" / "sigstore"
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


@pytest.fixture(autouse=True)
def _fixtures_present() -> None:
    require_fixtures()
