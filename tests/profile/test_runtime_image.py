"""`spec.runtime.image`: the platform's runtime image (issue 10, class 9). Required where the tier
needs the injected launcher and shim, a warning elsewhere, and written so admission can compare it
verbatim."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from secureml.core import contract
from secureml.core.errors import ProfileError
from secureml.profile import runtime_image
from secureml.profile.model import TenantProfile

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"registry.acme.example/platform/secureml-runtime@{DIGEST}"


def _profile(name: str) -> dict:
    return yaml.safe_load((ROOT / "profiles" / f"{name}.yaml").read_text())


def _problems(data: dict) -> dict[str, str]:
    with pytest.raises(ProfileError) as caught:
        TenantProfile.from_dict(data, source="p.yaml")
    return dict(caught.value.problems)


@pytest.mark.parametrize("name", ["team-conf", "team-restricted"])
def test_strict_tiers_refuse_a_profile_without_it(name: str) -> None:
    data = _profile(name)
    del data["spec"]["runtime"]["image"]
    problems = _problems(data)
    assert "runtime image" in problems["spec.runtime.image"]


@pytest.mark.parametrize(
    "image",
    [
        "registry.acme.example/platform/secureml-runtime:1.0",  # a tag: mutable
        f"registry.acme.example/platform/secureml-runtime:1.0@{DIGEST}",  # tag beside digest
        f"secureml-runtime@{DIGEST}",  # Docker Hub implied: not the text admission compares
        "registry.acme.example/platform/secureml-runtime@sha256:abc",  # truncated digest
    ],
)
def test_image_must_be_registry_repository_at_digest(image: str) -> None:
    data = _profile("team-a")
    data["spec"]["runtime"] = {"image": image}
    problems = _problems(data)
    assert any(path.startswith("spec.runtime") for path in problems), problems


def _team_a_without_it() -> dict:
    data = _profile("team-a")
    del data["spec"]["runtime"]["image"]
    return data


def test_internal_tier_without_it_loads_with_a_warning() -> None:
    profile = TenantProfile.from_dict(_team_a_without_it())
    assert profile.spec.runtime.image is None
    (warning,) = runtime_image.warnings(profile)
    assert "runtime.image" in warning and "own image" in warning
    assert runtime_image.launcher_prefix(profile) == contract.LAUNCHER_PREFIX
    assert runtime_image.shim_library(profile) == contract.SHIM_LIBRARY_PATH


def test_with_it_the_launcher_and_shim_are_the_injected_ones() -> None:
    data = _profile("team-a")
    data["spec"]["runtime"]["image"] = IMAGE
    profile = TenantProfile.from_dict(data)
    assert runtime_image.warnings(profile) == []
    assert runtime_image.launcher_prefix(profile) == (contract.RUNTIME_LAUNCHER, "--")
    assert runtime_image.shim_library(profile) == contract.RUNTIME_SHIM


def test_validate_warns_where_the_runtime_is_not_injected(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secureml.cli import app

    plain = tmp_path / "team-a.yaml"
    plain.write_text(yaml.safe_dump(_team_a_without_it()))
    result = CliRunner().invoke(
        app, ["profile", "validate", str(plain), str(ROOT / "profiles/team-conf.yaml")]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if ": warning: " in line]
    assert len(warnings) == 1 and "team-a.yaml: warning: spec.runtime.image" in warnings[0]
