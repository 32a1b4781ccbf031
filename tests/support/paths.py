"""The repository's folders the tests read, and ../shared/fixtures (skipped where absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"
PROFILES_DIR = REPO / "profiles"
ATTACKS_DIR = REPO / "tests" / "rules" / "attacks"
REFERENCE_PIPELINES = sorted((REPO / "pipelines").glob("*.py"))


def fixture_dir(*parts: str) -> Path:
    """A folder of ../shared/fixtures, or a skip saying it is absent from this checkout."""
    path = FIXTURES.joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"{path} is absent (a checkout without ../shared/fixtures)")
    return path


def fixture_file(*parts: str) -> Path:
    """A file of ../shared/fixtures, or a skip saying it is absent from this checkout."""
    path = FIXTURES.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} is absent (a checkout without ../shared/fixtures)")
    return path
