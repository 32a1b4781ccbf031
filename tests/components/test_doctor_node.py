"""The doctor-node component under kfp.local, on the fake NVML: the step sees the node's GPUs,
judges them against the profile it is given, writes the report, and fails on a failed check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from secureml.components import doctor_node_op
from tests.support.doctor_host import DRIVER, host_root
from tests.support.fakegpu import FakeConfidential, FakeDevice

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3"


def _local(tmp_path: Path) -> None:
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))


def test_doctor_step_reports_the_node_against_the_profile(
    make_fake_gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from secureml import WholeGPU

    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100, persistence_mode=False)],
        driver_version=DRIVER,
        confidential=FakeConfidential(mode="on", ready=True, capable=True, cpu=2),
    )
    for key, value in gpu.env({}).items():  # the step's subprocess sees the fake driver
        monkeypatch.setenv(key, value)
    _local(tmp_path)
    doctor = doctor_node_op(image="python:3.11", gpu=WholeGPU(1))
    profile = (REPO / "profiles/team-restricted.yaml").read_text()
    task = doctor(
        profiles=profile,
        node_labels="secureml.dev/pool=restricted-h100",
        root=str(host_root(tmp_path)),
    )
    assert task.outputs["Output"] == "warn"  # persistence off
    report = json.loads(Path(task.outputs["report"].path).read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert "toolkit.envvar" not in checks  # the host's file is not in a step's container
    assert checks["cc.state"]["status"] == "pass"
    assert checks["gpu[0].persistence"]["status"] == "warn"
    assert task.outputs["metrics"].metadata == {"pass": len(checks) - 1, "warn": 1, "fail": 0}


def test_doctor_step_fails_on_a_failed_check(
    make_fake_gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from secureml import WholeGPU

    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100, retired_pages_pending=True)], driver_version=DRIVER
    )
    for key, value in gpu.env({}).items():
        monkeypatch.setenv(key, value)
    _local(tmp_path)
    doctor = doctor_node_op(image="python:3.11", gpu=WholeGPU(1))
    with pytest.raises(RuntimeError):
        doctor(
            profiles=(REPO / "profiles/team-restricted.yaml").read_text(),
            root=str(host_root(tmp_path)),
        )
