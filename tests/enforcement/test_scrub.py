"""Scrub before and after the step, through the CUDA driver API, on the fake GPU.

The fake keeps device memory in a file shared by every process, as a real GPU keeps it across
tenants: a previous tenant's bytes ("residue") are what the next allocation returns unless the
scrub zeroed them. `cuda_step.py` is a GPU step that reports what it finds and leaves data behind.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from tests.support.fakegpu import FakeDevice, FakeGPU, FakeMig, MiB, run_python

from .conftest import Launch, launcher_env

MakeGPU = Callable[..., FakeGPU]
CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))
WHOLE = json.dumps({"kind": "whole", "count": 1, "product": None})
RESIDUE = 0xA5


def _gpu_env(**env: str) -> dict[str, str]:
    return {contract.ENV_ISOLATION: "dedicated", contract.ENV_GPU_REQUEST: WHOLE, **env}


def _step(*args: str) -> list[str]:
    return [sys.executable, CUDA_STEP, *args]


@pytest.mark.parametrize("scrub", [True, False])
def test_scrub_before_removes_a_previous_tenants_residue(
    launch: Launch, make_fake_gpu: MakeGPU, scrub: bool
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB, residue=RESIDUE)])
    env = _gpu_env(
        **{contract.ENV_SCRUB_BEFORE: str(scrub).lower(), contract.ENV_SCRUB_VERIFY: "full"}
    )
    result = launch(_step("--alloc", str(16 * MiB), "--report-nonzero"), env, gpu=gpu)

    assert result.returncode == 0, result.stderr
    nonzero_seen_by_step = int(result.stdout)
    if not scrub:  # the control: without the scrub the step reads the previous tenant's bytes
        assert nonzero_seen_by_step == 16 * MiB
        assert result.stage("scrub-before")["reason"] == "not required by the profile"
        return
    assert nonzero_seen_by_step == 0
    assert gpu.read_memory().count(RESIDUE) == 0
    detail = result.stage("scrub-before")["detail"]
    assert detail["zeroed_bytes"] == 64 * MiB and detail["coverage"] == 1.0
    (device,) = detail["devices"]
    assert device["verified_bytes"] == 64 * MiB and device["verify"] == "full"
    assert device["gb_per_s"] > 0


@pytest.mark.parametrize("scrub", [True, False])
def test_scrub_after_erases_what_the_step_left(
    launch: Launch, make_fake_gpu: MakeGPU, scrub: bool
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB)])
    env = _gpu_env(
        **{contract.ENV_SCRUB_AFTER: str(scrub).lower(), contract.ENV_SCRUB_VERIFY: "sample"}
    )
    result = launch(_step("--alloc", str(8 * MiB), "--fill", "0x5A"), env, gpu=gpu)

    assert result.returncode == 0, result.stderr
    left_behind = gpu.read_memory().count(0x5A)
    if not scrub:
        assert left_behind == 8 * MiB
        return
    assert left_behind == 0
    detail = result.stage("scrub-after")["detail"]
    assert detail["zeroed_bytes"] == 64 * MiB
    (device,) = detail["devices"]
    assert 0 < device["verified_bytes"] < 64 * MiB  # sample: a few windows per chunk


def test_scrub_runs_after_a_failing_step(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB)])
    code = (
        f"import subprocess, sys; subprocess.run([sys.executable, {CUDA_STEP!r}, '--alloc', "
        f"'{4 * MiB}', '--fill', '0x5A'], check=True); sys.exit(9)"
    )
    result = launch(
        [sys.executable, "-c", code], _gpu_env(**{contract.ENV_SCRUB_AFTER: "true"}), gpu=gpu
    )

    assert result.returncode == 9
    assert result.stage("scrub-after")["status"] == "ok"
    assert gpu.read_memory().count(0x5A) == 0


def test_scrub_that_cannot_take_the_memory_fails_closed(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB)], fail_alloc_after=0)
    marker = tmp_path / "ran"
    result = launch(
        [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        _gpu_env(**{contract.ENV_SCRUB_BEFORE: "true"}),
        gpu=gpu,
    )

    assert result.returncode == ExitCode.SCRUB_BEFORE
    assert not marker.exists()
    assert f"could take only 0 of the {64 * MiB} bytes" in result.stage("scrub-before")["error"]


def test_cuda_that_does_not_start_fails_the_scrub(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    gpu = make_fake_gpu(fail_cuinit=100)  # CUDA_ERROR_NO_DEVICE
    result = launch(
        [sys.executable, "-c", "pass"], _gpu_env(**{contract.ENV_SCRUB_BEFORE: "true"}), gpu=gpu
    )

    assert result.returncode == ExitCode.SCRUB_BEFORE
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE" in result.stage("scrub-before")["error"]


def test_scrub_after_failure_overrides_a_successful_step(
    launch: Launch, make_fake_gpu: MakeGPU
) -> None:
    # the step's own allocation is the last one the fake grants: the scrub after gets nothing
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB)], fail_alloc_after=1)
    result = launch(
        _step("--alloc", str(4 * MiB), "--fill", "0x5A"),
        _gpu_env(**{contract.ENV_SCRUB_AFTER: "true"}),
        gpu=gpu,
    )

    assert result.returncode == ExitCode.SCRUB_AFTER, result.stderr
    record = result.record
    assert record["child_exit_code"] == 0 and record["exit_code"] == ExitCode.SCRUB_AFTER
    assert result.stage("scrub-after")["status"] == "failed"


def test_scrub_reaches_the_mig_instance_it_was_given(make_fake_gpu: MakeGPU) -> None:
    mig = FakeMig(profile="1g.10gb", memory=48 * MiB)
    gpu = make_fake_gpu(devices=[FakeDevice(mig_mode=True, migs=[mig, FakeMig()], residue=RESIDUE)])
    code = "import json; from secureml.enforcement.scrub import scrub_devices; print(json.dumps(scrub_devices('full')))"
    proc = run_python(code, launcher_env({"CUDA_VISIBLE_DEVICES": mig.uuid}, gpu))

    assert proc.returncode == 0, proc.stderr
    (device,) = json.loads(proc.stdout)["devices"]
    assert device["zeroed_bytes"] == device["total_bytes"] == 48 * MiB
    assert gpu.read_memory(device=0, mig=0).count(RESIDUE) == 0
    other = gpu.read_memory(device=0, mig=1)  # the other tenant's instance was not touched
    assert other.count(RESIDUE) == len(other) == 64 * MiB
