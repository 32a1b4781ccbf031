"""`spec.gpu.confidentialComputing`: for tiers confidential and restricted, on CC-capable models only."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.core.errors import ProfileError
from secureml.nvidia.catalogue import MIG_CATALOGUE
from secureml.profile.confidential import cc_models
from secureml.profile.model import load_profile

ROOT = Path(__file__).resolve().parents[2]


def _written(tmp_path: Path, base: str, old: str, new: str) -> Path:
    text = (ROOT / "profiles" / f"{base}.yaml").read_text()
    assert old in text
    path = tmp_path / f"{base}.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_the_catalogue_marks_hopper_and_blackwell_only() -> None:
    assert cc_models() == ["H100-80GB", "H100-94GB", "H200-141GB", "B200"]
    assert not MIG_CATALOGUE["A100-80GB"].confidential_computing


def test_team_restricted_requires_cc_and_team_conf_may(tmp_path: Path) -> None:
    assert (
        load_profile(ROOT / "profiles/team-restricted.yaml").spec.gpu.confidential_computing
        == "required"
    )
    conf = _written(
        tmp_path,
        "team-conf",
        "migStrategy: mixed\n",
        "migStrategy: mixed\n    confidentialComputing: required\n",
    )
    assert load_profile(conf).spec.gpu.confidential_computing == "required"
    assert load_profile(ROOT / "profiles/team-a.yaml").spec.gpu.confidential_computing == "off"


def test_a_lower_tier_is_refused_with_the_line(tmp_path: Path) -> None:
    path = _written(
        tmp_path,
        "team-a",
        "migStrategy: mixed\n",
        "migStrategy: mixed\n    confidentialComputing: required\n",
    )
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    err = caught.value
    problems = dict(err.problems)
    assert "tier internal makes no isolation promise" in problems["spec.gpu.confidentialComputing"]
    assert "A100-80GB has no confidential-computing mode" in problems["spec.gpu.models[0]"]
    line = (path.read_text().splitlines().index("    confidentialComputing: required")) + 1
    assert err.where_of("spec.gpu.confidentialComputing") == f"{path}:{line}:5"


def test_models_must_all_be_cc_capable_and_listed(tmp_path: Path) -> None:
    mixed = _written(
        tmp_path, "team-restricted", "models: [H100-80GB]", "models: [H100-80GB, A100-80GB]"
    )
    with pytest.raises(ProfileError) as caught:
        load_profile(mixed)
    assert [p for p, _ in caught.value.problems] == ["spec.gpu.models[1]"]
    (tmp_path / "none").mkdir()
    unlisted = _written(tmp_path / "none", "team-restricted", "    models: [H100-80GB]\n", "")
    with pytest.raises(ProfileError) as caught:
        load_profile(unlisted)
    assert "needs the pool's GPU models listed" in dict(caught.value.problems)["spec.gpu.models"]


def test_an_unknown_value_is_refused(tmp_path: Path) -> None:
    path = _written(
        tmp_path,
        "team-restricted",
        "confidentialComputing: required",
        "confidentialComputing: yes-please",
    )
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert [p for p, _ in caught.value.problems] == ["spec.gpu.confidentialComputing"]
