"""Shared material for the bundle tests: the example profiles and the real upstream fixtures."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from secureml.bundle import BundleOptions, render_objects
from secureml.profile.model import TenantProfile, load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))


def profile_ids() -> list[str]:
    return [path.stem for path in PROFILES]


@pytest.fixture(params=PROFILES, ids=profile_ids())
def profile(request: pytest.FixtureRequest) -> TenantProfile:
    return load_profile(request.param)


def load(name: str) -> TenantProfile:
    return load_profile(ROOT / "profiles" / f"{name}.yaml")


@pytest.fixture(autouse=True, scope="session")
def _schema_files_read_once() -> Any:
    """kubernetes-validate re-reads its (large) schema files on every call; the files do not
    change during a run, so read each once. Validation itself is untouched."""
    import kubernetes_validate.utils as utils

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(utils, "schema_contents", cache(utils.schema_contents))
        yield


@cache
def rendered(name: str, options: BundleOptions) -> list[dict[str, Any]]:
    """The objects of example profile `name`'s bundle, rendered once per test process."""
    return render_objects(load(name), options)
