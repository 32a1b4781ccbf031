"""`secureml run --local`: the real compiler, the real launcher, kfp.local, the dev Workload API."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.localrun.runner import RunLayout, run_pipeline
from secureml.profile.model import load_profile

from .pipelines import breaks, needs_gpu, numbers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def team_a():
    return load_profile(ROOT / "profiles" / "team-a.yaml")


@pytest.fixture(scope="module")
def numbers_run(team_a, tmp_path_factory):
    layout = RunLayout(tmp_path_factory.mktemp("run") / "numbers")
    return run_pipeline(numbers, team_a, layout, arguments={"count": 4}, dev_identity=True)


def test_every_step_ran_under_the_launcher_with_its_own_identity(numbers_run, team_a) -> None:
    assert numbers_run.succeeded, numbers_run.failure
    by_step = {record["step"]: record for record in numbers_run.records}
    assert set(by_step) == {"make-numbers", "total"}
    for step, record in by_step.items():
        expected = team_a.spiffe_id("numbers", step)
        assert record["spiffe_id"] == expected == record["expected_spiffe_id"]
        stages = {stage["name"]: stage for stage in record["stages"]}
        assert stages["identity"]["status"] == "ok"
        assert stages["identity"]["required"] is True
        assert stages["run"]["status"] == "ok" and record["exit_code"] == 0
        assert record["tenant"] == "team-a" and record["pipeline"] == "numbers"


def test_svid_files_are_private_and_the_step_could_read_them(numbers_run) -> None:
    record = numbers_run.records[0]
    identity = next(s for s in record["stages"] if s["name"] == "identity")
    files = identity["detail"]["files"]
    folder = Path(files[contract.ENV_SVID_KEY]).parent
    assert folder.parent == numbers_run.layout.identity_dir.resolve()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(path).st_mode) == 0o600 for path in files.values())


def test_the_compiled_pipeline_that_ran_carries_the_local_overlay(numbers_run) -> None:
    import yaml

    spec = yaml.safe_load(numbers_run.layout.compiled.read_text())
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor["container"]
        assert container["command"][:4] == list(contract.LAUNCHER_PREFIX)
        env = {item["name"]: item["value"] for item in container["env"]}
        assert env[contract.ENV_AUDIT_DIR] == str(numbers_run.layout.audit_dir.resolve())
        assert env[contract.SPIFFE_SOCKET_ENV].startswith("unix:///")
        assert env[contract.SPIFFE_SOCKET_ENV] != "unix:///spiffe-workload-api/spire-agent.sock"


def test_identity_required_without_dev_identity_fails_before_running(team_a, tmp_path) -> None:
    layout = RunLayout(tmp_path / "run")
    with pytest.raises(SecuremlError) as caught:
        run_pipeline(numbers, team_a, layout)
    text = caught.value.diagnostics()
    assert "requires a SPIFFE identity" in text and "make-numbers" in text
    assert "--dev-identity" in text
    assert not layout.root.exists(), "nothing ran, nothing was written"


def test_gpu_step_on_a_machine_without_gpu_asks_for_simulation(team_a, tmp_path) -> None:
    from secureml.localrun.runner import machine_has_gpu

    if machine_has_gpu():
        pytest.skip("this machine has a GPU: the refusal only applies without one")
    with pytest.raises(SecuremlError) as caught:
        run_pipeline(needs_gpu, team_a, RunLayout(tmp_path / "run"), dev_identity=True)
    assert "MIG 1g.10gb" in caught.value.what and "--simulate-gpu" in caught.value.fix


def test_a_failing_step_fails_the_run_and_is_recorded(team_a, tmp_path) -> None:
    result = run_pipeline(
        breaks, team_a, RunLayout(tmp_path / "run"), arguments={"code": 5}, dev_identity=True
    )
    assert not result.succeeded and "fail-on-purpose" in result.failure
    assert "\x1b[" not in result.failure
    (record,) = result.records
    assert record["exit_code"] == 5 and record["child_exit_code"] == 5
    assert Path(record["audit_file"]).parent == result.layout.audit_dir.resolve()


def test_an_output_folder_is_not_reused(numbers_run, team_a) -> None:
    from secureml.core.errors import InputError

    with pytest.raises(InputError, match="already holds the files of a run"):
        run_pipeline(numbers, team_a, numbers_run.layout, dev_identity=True)
