"""Shared paths and helpers for the rule-catalogue tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secureml.core import contract
from secureml.core.jsontree import copy_json
from secureml.pods.admitted import as_created
from secureml.profile.model import TenantProfile, load_profile
from secureml.profile.runtime_image import launcher_prefix

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"
PROFILES_DIR = REPO / "profiles"
EXAMPLE_PROFILES = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
ATTACKS_DIR = Path(__file__).resolve().parent / "attacks"
REFERENCE_PIPELINES = sorted((REPO / "pipelines").glob("*.py"))


def fixture_dir(*parts: str) -> Path:
    """A folder of ../shared/fixtures, or a skip saying it is absent from this checkout."""
    path = FIXTURES.joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"{path} is absent (a checkout without ../shared/fixtures)")
    return path


def admitted(pod: dict[str, Any], profile: TenantProfile) -> dict[str, Any]:
    """A hand-written pod as it reaches the validating policy on CREATE: the Pod API's defaults,
    then the tenant's mutating policy, which injects the platform's runtime where the profile names
    `runtime.image` (`as_created`: the path `check-pod` takes). A new dict."""
    return as_created(pod, profile)


def with_launcher_of(pod: dict[str, Any], profile: TenantProfile) -> dict[str, Any]:
    """A corpus pod (written with the launcher of the step's image) with `main`'s launcher as the
    compiler writes it for `profile` (`runtime_image.launcher_prefix`: the injected one where the
    profile names `runtime.image`). A new dict."""
    result = copy_json(pod)
    old, new = list(contract.LAUNCHER_PREFIX), list(launcher_prefix(profile))
    for container in result["spec"]["containers"]:
        if container.get("name") != contract.KFP_MAIN_CONTAINER:
            continue
        for key in ("command", "args"):
            argv = container.get(key) or []
            starts = [i for i in range(len(argv)) if argv[i : i + len(old)] == old]
            if starts:
                container[key] = argv[: starts[0]] + new + argv[starts[0] + len(old) :]
    return result


def example_profile(name: str) -> TenantProfile:
    return load_profile(PROFILES_DIR / f"{name}.yaml")


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
