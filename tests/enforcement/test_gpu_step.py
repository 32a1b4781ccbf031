"""A whole GPU step through every stage, on the `fake_gpu` fixture.

These tests assume nothing the fake alone would make true: with SECUREML_TEST_REAL_GPU=1 on a GPU
machine the fixture is the real driver and they run unchanged (device 0, whatever its model).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from secureml.core import contract
from secureml.enforcement.launch import ExitCode

from .conftest import Launch, launcher_env

CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))
MiB = 1 << 20
DEVICE_0 = {"CUDA_VISIBLE_DEVICES": "0"}


def _previous_tenant(gpu: Any, pattern: int) -> None:
    """A process that fills device memory with `pattern` and exits without clearing it."""
    proc = subprocess.run(
        [sys.executable, CUDA_STEP, "--alloc", str(32 * MiB), "--fill", hex(pattern)],
        env=launcher_env(DEVICE_0, gpu),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_dedicated_step_through_every_gpu_stage(launch: Launch, fake_gpu: Any) -> None:
    _previous_tenant(fake_gpu, 0x5A)
    env = {
        **DEVICE_0,
        contract.ENV_ISOLATION: "dedicated",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "whole", "count": 1, "product": None}),
        contract.ENV_SCRUB_BEFORE: "true",
        contract.ENV_SCRUB_AFTER: "true",
        contract.ENV_SCRUB_VERIFY: "sample",
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
    }
    result = launch(
        [sys.executable, CUDA_STEP, "--alloc", str(32 * MiB), "--report-nonzero", "--hold", "0.5"],
        env,
        gpu=fake_gpu,
        timeout=300,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"  # what the previous tenant left was zeroed before the step
    record = result.record
    statuses = {s["name"]: s["status"] for s in record["stages"]}
    assert statuses == {
        "config": "ok",
        "shim-claim": "skipped",
        "identity": "skipped",
        "verify-inputs": "skipped",
        "preflight": "ok",
        "scrub-before": "ok",
        "shim": "skipped",
        "run": "ok",
        "scrub-after": "ok",
    }
    (device,) = record["gpu"]["devices"]
    assert device["uuid"].startswith("GPU-") and device["memory_total"] > 0
    assert record["gpu"]["driver_version"] and record["gpu"]["cuda_version"]
    for name in ("scrub-before", "scrub-after"):
        detail = result.stage(name)["detail"]
        assert detail["coverage"] > 0.5 and detail["gb_per_s"] > 0
    assert record["peak_gpu_memory_bytes"] >= 32 * MiB
    assert record["violations"] == []


def test_time_sliced_step_over_its_share_is_stopped(launch: Launch, fake_gpu: Any) -> None:
    env = {
        **DEVICE_0,
        contract.ENV_ISOLATION: "timeslice",
        contract.ENV_GPU_REQUEST: json.dumps(
            {"kind": "timeslice", "memory": 16 * MiB, "compute": 10}
        ),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
        contract.ENV_WATCHDOG_GRACE: "2",
    }
    result = launch(
        [sys.executable, CUDA_STEP, "--alloc", str(64 * MiB), "--hold", "60"],
        env,
        gpu=fake_gpu,
        timeout=120,
    )

    assert result.returncode == ExitCode.WATCHDOG, result.stderr
    (violation,) = result.record["violations"]
    assert violation["used_bytes"] >= 64 * MiB > violation["limit_bytes"]
