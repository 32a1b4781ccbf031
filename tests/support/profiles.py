"""Tenant profiles for tests: the example profiles (profiles/*.yaml), loaded or changed field by field."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import yaml

from secureml.profile.model import TenantProfile, load_profile
from tests.support.paths import PROFILES_DIR, REFERENCE_PIPELINES

EXAMPLE_PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def example_profile(name: str) -> TenantProfile:
    return load_profile(PROFILES_DIR / f"{name}.yaml")


def profile_data(name: str = "team-a") -> dict[str, Any]:
    """An example profile as data; signatures not required so compiles need no bundles."""
    path = PROFILES_DIR / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["spec"].setdefault("images", {}).setdefault("signatures", {})["required"] = False
    return data


def merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` laid over it; a None value deletes the key."""
    result = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def make_profile(name: str = "team-a", **spec_changes: Any) -> TenantProfile:
    """An example profile with `spec` fields replaced (camelCase keys, as in YAML)."""
    data = profile_data(name)
    data["spec"] = merge(data["spec"], spec_changes)
    return TenantProfile.from_dict(data, source=f"test:{name}")


def reference_documents(profile: TenantProfile) -> Iterator[list[dict[str, Any]]]:
    """The pipelineSpec and platformSpec documents of each reference pipeline (pipelines/*.py)
    that compiles for `profile`, admission preview off."""
    from secureml.compile.compiler import CompileError, _documents, compile_pipeline
    from secureml.compile.pipeline_loader import load_pipeline

    for path in REFERENCE_PIPELINES:
        try:
            compiled = compile_pipeline(load_pipeline(path), profile, check_admission=False)
        except CompileError:
            continue
        assert compiled.component is not None
        yield _documents(compiled.component)
