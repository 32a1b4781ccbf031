"""`dsl.ParallelFor` under `run --local --simulate-gpu`: every run of a GPU task gets its own
simulated device, and the summary names the iteration (secureml._kfp.local_tasks is kfp.local's seam)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml._kfp.local_tasks import task_folder
from secureml.cli import app
from secureml.enforcement import simulator

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = Path(__file__).with_name("pipelines.py")


@pytest.mark.skipif(simulator.compiler() is None, reason="no C compiler to build the fake GPU")
def test_each_iteration_has_its_own_simulated_gpu_and_its_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "sweep",
            "--profile",
            str(ROOT / "profiles" / "team-a.yaml"),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--simulate-gpu",
            "--output-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    for i in range(3):
        assert f"on-mig [for-loop-2-iteration-{i}]  passed  0" in result.output
    assert "3 of 3 step(s) passed." in result.output
    records = [json.loads(p.read_text()) for p in (out / "audit").rglob("*.audit.json")]
    assert sorted(p.parent.name for p in (out / "audit").rglob("*.audit.json")) == [
        f"for-loop-2-iteration-{i}" for i in range(3)
    ]
    devices = {r["gpu"]["devices"][0]["uuid"] for r in records}
    assert len(devices) == 3, "each run of the GPU task had a device of its own"
    assert all(r["exit_code"] == 0 for r in records)
    assert not list((out / "fakegpu").rglob("*.mem*")), "fake device memory is removed"


def test_the_task_folder_comes_from_the_executor_input() -> None:
    executor_input = {"outputs": {"outputFile": "/root/run-1/for-loop-2-iteration-0/t/out.json"}}
    command = ["sh", "-c", "x", "--executor_input", json.dumps(executor_input), "--f", "t"]
    assert task_folder(command) == Path("/root/run-1/for-loop-2-iteration-0/t")
    assert task_folder(["sh", "-c", "x"]) is None


def test_a_failed_nested_step_is_named_by_its_qualified_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "nested-breaks",
            "--profile",
            str(ROOT / "profiles" / "team-a.yaml"),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1, result.output
    rows = [line.split()[:4] for line in result.output.splitlines() if "fail-on-purpose  " in line]
    assert ["fail-on-purpose", "passed", "0", "none"] in rows
    assert ["inner-breaks.fail-on-purpose", "FAILED", "at", "run"] in rows
    assert "the pipeline failed at step(s) inner-breaks.fail-on-purpose (kfp.local: " in (
        result.output
    )
