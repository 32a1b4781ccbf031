"""`secureml profile validate` reports every problem at once, each with file, line and column.

Field errors and cross-field contradictions in one run; duplicate keys refused with both lines;
YAML 1.1's unquoted `off` (a boolean) read as the `off` it was meant as; did-you-mean for unknown
fields. Profiles are written as text, so the lines asserted are the lines a user sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import ProfileError
from secureml.profile.model import load_profile

ROOT = Path(__file__).resolve().parents[2]
TEAM_A = (ROOT / "profiles/team-a.yaml").read_text()
runner = CliRunner()


def write(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    text = TEAM_A
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def validate(path: Path) -> list[str]:
    result = runner.invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.output.strip().splitlines()


def line_of(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def test_field_errors_and_contradictions_in_one_run(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ("tier: internal", "tier: confidential"),
        ("maxCompute: 50", "maxCompute: 150"),
        ("mig: {allowedProfiles:", "mig: {allowedProfile:"),
    )
    lines = validate(path)
    ts = line_of(path, "timeSlice:")
    assert f"{path}:{ts}:" in next(
        line for line in lines if ": spec.gpu.timeSlice.maxCompute: " in line
    )
    unknown = next(line for line in lines if ": spec.gpu.mig.allowedProfile: " in line)
    assert unknown.startswith(f"{path}:{line_of(path, 'allowedProfile')}:")
    assert "did you mean allowedProfiles?" in unknown
    contradiction = next(line for line in lines if ": spec.gpu.timeSlice: " in line)
    assert contradiction.startswith(f"{path}:{ts}:5: ")
    assert "tier confidential needs isolation mig or better" in contradiction
    assert "remove timeSlice" in contradiction
    # the quota on MIG profiles reads gpu.mig.allowedProfiles, which did not parse: no claim
    assert not any("quota on MIG profile" in line for line in lines)


def test_check_whose_input_failed_is_skipped(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ("tier: internal", "tier: secret"),
        ("allowedRegistries: [ghcr.io/acme/]", "allowedRegistries: [acme/]"),
    )
    lines = validate(path)
    assert any(": spec.tier: Input should be" in line for line in lines)
    # a check that does not read the tier still runs
    assert any(": spec.images.allowedRegistries[0]: " in line for line in lines)
    # a placeholder tier never speaks: no tier-based verdicts at all
    assert not any("tier public" in line or "tier placeholder" in line for line in lines)
    assert len(lines) == 2


def test_restricted_with_a_broken_whole_gpu_is_not_told_to_add_one(tmp_path: Path) -> None:
    path = write(
        tmp_path, ("tier: internal", "tier: restricted"), ("maxPerStep: 2", "maxPerStep: 0")
    )
    lines = validate(path)
    assert any(": spec.gpu.wholeGpu.maxPerStep: " in line for line in lines)
    assert not any("add wholeGpu" in line for line in lines)
    assert any(": spec.gpu.timeSlice: tier restricted" in line for line in lines)


def test_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path, ("  tier: internal\n", "  tier: internal\n  owner: {name: x}\n  tier: public\n")
    )
    lines = validate(path)
    first, second = line_of(path, "tier: internal"), line_of(path, "tier: public")
    dup = [line for line in lines if "duplicate key 'tier'" in line]
    assert len(dup) == 1
    assert dup[0].startswith(f"{path}:{second}:3: spec.tier: ")
    assert f"first at line {first}, again at line {second}" in dup[0]
    assert "keep exactly one" in dup[0]
    assert any("duplicate key 'owner'" in line for line in lines)


def test_duplicate_key_deep_inside_a_list_item_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ("{cidr: 10.0.0.0/8, ports: [443]}", "{cidr: 10.0.0.0/8, ports: [443], cidr: 0.0.0.0/0}"),
    )
    (line,) = validate(path)
    egress = line_of(path, "egress")
    assert line.startswith(f"{path}:{egress}:")
    assert "spec.network.egress[0].cidr: duplicate key 'cidr'" in line


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(TEAM_A + "x-defaults: {<<: {a: 1}, a: 2}\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    # only the unknown top-level field: the `<<` merge overridden by `a` is no duplicate
    assert [p for p, _ in caught.value.problems] == ["x-defaults"]


@pytest.mark.parametrize("written", ["off", "Off", "no", "false", "'off'"])
def test_unquoted_off_means_off_for_scrub_verify(tmp_path: Path, written: str) -> None:
    path = write(tmp_path, ("verify: sample", f"verify: {written}"))
    assert load_profile(path).spec.scrub.verify == "off"


def test_unquoted_on_for_scrub_verify_is_refused_with_what_to_write(tmp_path: Path) -> None:
    path = write(tmp_path, ("verify: sample", "verify: on"))
    (line,) = validate(path)
    assert line.startswith(f"{path}:{line_of(path, 'verify: on')}:")
    assert ": spec.scrub.verify: " in line
    assert "boolean true" in line and "write one of 'off', 'sample', 'full'" in line


def test_unquoted_shim_off_is_off_and_the_tier_still_refuses_it(tmp_path: Path) -> None:
    path = write(tmp_path, ("shim: enforce", "shim: off"))
    (line,) = validate(path)
    assert ": spec.gpu.timeSlice: tier internal needs isolation timeslice-shim" in line
    assert "runtime.shim is off" in line
    public = write(tmp_path, ("shim: enforce", "shim: off"), ("tier: internal", "tier: public"))
    assert load_profile(public).spec.runtime.shim == "off"


def test_missing_required_field_points_at_its_parent(tmp_path: Path) -> None:
    path = write(tmp_path, (", maxMemory: 16Gi", ""))
    (line,) = validate(path)
    assert line.startswith(f"{path}:{line_of(path, 'timeSlice:')}:5: spec.gpu.timeSlice.maxMemory:")
    assert "Field required" in line


def test_a_bad_dict_entry_fails_the_whole_dict(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ("tier: internal", "tier: confidential"),
        ("nodeSelector: {secureml.dev/pool: dedicated}", "nodeSelector: {secureml.dev/pool: 5}"),
    )
    lines = validate(path)
    assert any(": spec.gpu.wholeGpu.nodeSelector['secureml.dev/pool']: " in line for line in lines)
    # the selector is not empty, it is unreadable: no "give its node labels"
    assert not any(": spec.gpu.wholeGpu.nodeSelector: " in line for line in lines)
    assert any(": spec.gpu.timeSlice: tier confidential" in line for line in lines)
