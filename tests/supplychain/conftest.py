"""Every supply-chain test needs the real Sigstore material of ../shared/fixtures/sigstore."""

from __future__ import annotations

import pytest

from tests.support.sigstore_fixtures import require_fixtures


@pytest.fixture(autouse=True)
def _fixtures_present() -> None:
    require_fixtures()
