"""Shared material for the bundle tests: the example profiles and the real upstream fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.profile import TenantProfile, load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
FIXTURES = ROOT.parent / "shared" / "fixtures"


def profile_ids() -> list[str]:
    return [path.stem for path in PROFILES]


@pytest.fixture(params=PROFILES, ids=profile_ids())
def profile(request: pytest.FixtureRequest) -> TenantProfile:
    return load_profile(request.param)


def load(name: str) -> TenantProfile:
    return load_profile(ROOT / "profiles" / f"{name}.yaml")


def fixtures_dir(*parts: str) -> Path:
    folder = FIXTURES.joinpath(*parts)
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (a checkout without ../shared/fixtures)")
    return folder
