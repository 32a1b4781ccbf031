"""Shared paths and helpers for the rule-catalogue tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.profile import TenantProfile, load_profile

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"
PROFILES_DIR = REPO / "profiles"
EXAMPLE_PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
ATTACKS_DIR = Path(__file__).resolve().parent / "attacks"


def fixture_dir(*parts: str) -> Path:
    """A folder of ../shared/fixtures, or a skip saying it is absent from this checkout."""
    path = FIXTURES.joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"{path} is absent (a checkout without ../shared/fixtures)")
    return path


def example_profile(name: str) -> TenantProfile:
    return load_profile(PROFILES_DIR / f"{name}.yaml")
