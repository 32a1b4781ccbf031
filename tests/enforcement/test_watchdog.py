"""The watchdog: real per-process GPU memory from NVML against the limit of a shared GPU.

The step allocates through the (fake) CUDA driver; the fake NVML reports that use per process, as
the real one does. No shim is armed here: the watchdog is what catches a step that went around it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from secureml.enforcement.watchdog import Watchdog
from tests.support.fakegpu import FakeDevice, FakeGPU, FakeProcess, MiB

from .conftest import Launch

MakeGPU = Callable[..., FakeGPU]
CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))


def _timeslice_env(limit: int, **env: str) -> dict[str, str]:
    return {
        contract.ENV_ISOLATION: "timeslice",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "timeslice", "memory": limit, "compute": 50}),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
        contract.ENV_WATCHDOG_GRACE: "2",
        **env,
    }


def _step(*args: str) -> list[str]:
    return [sys.executable, CUDA_STEP, *args]


def test_step_over_its_memory_limit_is_stopped(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    started = time.monotonic()
    result = launch(
        _step("--alloc", str(32 * MiB), "--hold", "60"),
        _timeslice_env(8 * MiB, **{contract.ENV_SCRUB_AFTER: "true"}),
        gpu=gpu,
    )
    elapsed = time.monotonic() - started

    assert result.returncode == ExitCode.WATCHDOG, result.stderr
    assert elapsed < 30
    record = result.record
    (violation,) = record["violations"]
    assert violation["kind"] == "gpu-memory" and violation["action"] == "SIGTERM"
    assert violation["used_bytes"] == 32 * MiB and violation["limit_bytes"] == 8 * MiB
    assert record["peak_gpu_memory_bytes"] == 32 * MiB
    assert record["child_exit_code"] == 128 + 15
    assert result.stage("scrub-after")["status"] == "ok"  # the scrub still runs after a stop
    assert "over its limit" in result.stderr


def test_step_ignoring_sigterm_is_killed_after_the_grace_period(
    launch: Launch, make_fake_gpu: MakeGPU
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    result = launch(
        _step("--alloc", str(32 * MiB), "--hold", "60", "--ignore-term"),
        _timeslice_env(8 * MiB, **{contract.ENV_WATCHDOG_GRACE: "0.5"}),
        gpu=gpu,
    )

    assert result.returncode == ExitCode.WATCHDOG
    (violation,) = result.record["violations"]
    assert violation["action"] == "SIGTERM, SIGKILL"
    assert result.record["child_exit_code"] == 128 + 9


def test_memory_of_grandchildren_counts_and_strangers_do_not(
    launch: Launch, make_fake_gpu: MakeGPU
) -> None:
    # another tenant's process holds 64 MiB on the same GPU: not the step's
    gpu = make_fake_gpu(
        devices=[FakeDevice(memory=128 * MiB)], processes=[FakeProcess(pid=4242, used=64 * MiB)]
    )
    code = (
        "import subprocess, sys\n"
        f"procs = [subprocess.Popen([sys.executable, {CUDA_STEP!r}, '--alloc', '{6 * MiB}', '--hold', '10'])"
        " for _ in range(2)]\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    result = launch([sys.executable, "-c", code], _timeslice_env(8 * MiB), gpu=gpu)

    assert result.returncode == ExitCode.WATCHDOG, result.stderr
    (violation,) = result.record["violations"]
    assert violation["used_bytes"] == 12 * MiB
    assert len(violation["processes"]) == 2 and "4242" not in violation["processes"]


def test_step_within_its_limit_runs_to_the_end(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    result = launch(_step("--alloc", str(4 * MiB), "--hold", "1"), _timeslice_env(8 * MiB), gpu=gpu)

    assert result.returncode == 0, result.stderr
    record = result.record
    assert record["violations"] == [] and record["peak_gpu_memory_bytes"] == 4 * MiB
    watchdog = result.stage("run")["watchdog"]
    assert (
        watchdog["limit_bytes"] == 8 * MiB
        and watchdog["samples"] >= 3
        and watchdog["error"] is None
    )


def test_dedicated_gpu_has_no_limit_but_peak_is_recorded(
    launch: Launch, make_fake_gpu: MakeGPU
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    env = {
        contract.ENV_ISOLATION: "dedicated",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "whole", "count": 1, "product": None}),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
    }
    result = launch(_step("--alloc", str(48 * MiB), "--hold", "1"), env, gpu=gpu)

    assert result.returncode == 0, result.stderr
    assert result.record["peak_gpu_memory_bytes"] == 48 * MiB
    assert result.stage("run")["watchdog"]["limit_bytes"] is None


class _NVMLThatStops:
    """NVML that answers once and then fails, as a driver does when the GPU falls off the bus."""

    def __init__(self) -> None:
        self.calls = 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[object]:  # noqa: N802 - NVML's name
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return []


def _watch_with_failing_nvml(monkeypatch: pytest.MonkeyPatch, limit: int | None) -> Watchdog:
    from contextlib import contextmanager

    from secureml.enforcement import watchdog as watchdog_module

    @contextmanager
    def session() -> Iterator[_NVMLThatStops]:
        yield _NVMLThatStops()

    monkeypatch.setattr(watchdog_module, "nvml_session", session)
    monkeypatch.setattr(watchdog_module, "physical_handles", lambda nvml: [(0, object())])
    monkeypatch.setattr(watchdog_module, "mig_handles", lambda nvml, gpu: [])
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    dog = Watchdog(child, limit_bytes=limit, interval_s=0.01, grace_s=1)
    dog.start()
    try:
        child.wait(timeout=10 if limit is not None else 0.5)
    except subprocess.TimeoutExpired:
        pass
    dog.stop()
    if child.poll() is None:
        child.kill()
        child.wait()
    return dog


def test_nvml_lost_mid_run_stops_a_step_whose_limit_it_enforces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dog = _watch_with_failing_nvml(monkeypatch, limit=8 * MiB)
    (violation,) = dog.violations
    assert violation["kind"] == "watchdog-lost" and violation["action"] == "SIGTERM"
    assert "GPU_IS_LOST" in violation["error"] and violation["limit_bytes"] == 8 * MiB
    assert dog.child.returncode == -15  # stopped by the watchdog, not by the test's cleanup


def test_nvml_lost_mid_run_is_only_recorded_where_no_limit_is_enforced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dog = _watch_with_failing_nvml(monkeypatch, limit=None)  # MIG / whole GPU: hardware limits
    assert dog.violations == []
    assert dog.error is not None and "GPU_IS_LOST" in dog.error
