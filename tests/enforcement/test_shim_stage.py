"""The shim stage: limits checked against the request, the shim armed in the child only.

The shim is the real `libsecureml_shim.so` built from enforcement/shim/ (engineer D's C), the
driver the fake one; the step allocates through CUDA and the shim refuses what exceeds its limit.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fakegpu import FakeDevice, FakeGPU, MiB, build_shim

from secureml import contract
from secureml.enforcement.launch import ExitCode

from .conftest import Launch

MakeGPU = Callable[..., FakeGPU]
CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))
LIMIT = 8 * MiB


@pytest.fixture
def shim_library() -> Path:
    return build_shim()


def _limits_file(tmp_path: Path, memory: int = LIMIT, compute: int = 50) -> Path:
    path = tmp_path / "podinfo" / "limits"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(contract.render_shim_limits(memory_bytes=memory, compute_percent=compute, scrub_on_free=True))
    path.chmod(0o444)
    return path


def _env(shim_library: Path, limits: Path, **env: str) -> dict[str, str]:
    return {
        contract.ENV_ISOLATION: "timeslice-shim",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "timeslice", "memory": LIMIT, "compute": 50}),
        contract.ENV_SHIM_MODE: "enforce",
        contract.ENV_SHIM_LIMITS_FILE: str(limits),
        contract.ENV_SHIM_LIBRARY: str(shim_library),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
        **env,
    }


def test_shim_refuses_what_exceeds_the_limit_and_the_scrub_runs_outside_it(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    env = _env(shim_library, _limits_file(tmp_path), **{contract.ENV_SCRUB_AFTER: "true"})
    result = launch([sys.executable, CUDA_STEP, "--alloc", str(16 * MiB)], env, gpu=gpu)

    assert result.returncode == 1, result.stderr  # the step's own failure: its allocation was refused
    assert "cuMemAlloc failed with CUDA error 2" in result.stderr
    record = result.record
    assert record["limits"] == {"memory": LIMIT, "compute": 50, "scrub_on_free": True,
                                "source": str(tmp_path / "podinfo" / "limits")}
    assert record["shim_counters"]["refused"] >= 1
    assert record["shim_counters"]["memory_limit"] == LIMIT
    # the launcher's own scrub is not under the shim: it reached the whole device, not 8 MiB
    assert result.stage("scrub-after")["detail"]["zeroed_bytes"] == 128 * MiB
    assert result.stage("shim")["detail"]["library"] == str(shim_library)


def test_step_within_its_limit_runs_under_the_shim(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    code = (
        "import os, subprocess, sys; print(os.environ['LD_PRELOAD']); "
        f"subprocess.run([sys.executable, {CUDA_STEP!r}, '--alloc', '{4 * MiB}'], check=True)"
    )
    result = launch([sys.executable, "-c", code], _env(shim_library, _limits_file(tmp_path)), gpu=gpu)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split(":")[0].strip() == str(shim_library)
    counters = result.record["shim_counters"]
    assert counters["refused"] == 0 and counters["peak"] >= 4 * MiB


def test_missing_limits_file_fails_closed(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu()
    marker = tmp_path / "ran"
    result = launch(
        [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        _env(shim_library, tmp_path / "absent" / "limits"), gpu=gpu,
    )
    assert result.returncode == ExitCode.SHIM
    assert not marker.exists()
    assert "cannot read the shim limits file" in result.stage("shim")["error"]


def test_limits_that_differ_from_the_request_fail_closed(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu()
    result = launch(
        [sys.executable, "-c", "pass"], _env(shim_library, _limits_file(tmp_path, memory=64 * MiB)), gpu=gpu
    )
    assert result.returncode == ExitCode.SHIM
    assert f"memory={64 * MiB}" in result.stage("shim")["error"]


def test_malformed_limits_file_fails_closed(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    limits = tmp_path / "limits"
    limits.write_text("version=1\nmemory=8Gi\n")
    result = launch([sys.executable, "-c", "pass"], _env(shim_library, limits), gpu=make_fake_gpu())
    assert result.returncode == ExitCode.SHIM
    assert "line 2" in result.stage("shim")["error"]


def test_unbuilt_shim_fails_closed(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    result = launch(
        [sys.executable, "-c", "pass"], _env(tmp_path / "no-shim.so", _limits_file(tmp_path)), gpu=make_fake_gpu()
    )
    assert result.returncode == ExitCode.SHIM
    assert "not built" in result.stage("shim")["error"]


def test_shim_off_on_a_time_sliced_gpu_is_recorded(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    env = {
        contract.ENV_ISOLATION: "timeslice",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "timeslice", "memory": LIMIT, "compute": 50}),
    }
    result = launch([sys.executable, "-c", "import os; print(os.environ.get('LD_PRELOAD', ''))"], env, gpu=make_fake_gpu())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    assert result.stage("shim") == {"name": "shim", "status": "skipped", "reason": "off in the profile", "seconds": 0.0}


def test_scrub_refuses_to_run_under_the_shim(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    # the launcher itself preloaded, as /etc/ld.so.preload would do it
    env = _env(shim_library, _limits_file(tmp_path), **{
        contract.ENV_SCRUB_BEFORE: "true", "LD_PRELOAD": str(shim_library),
    })
    result = launch([sys.executable, "-c", "pass"], env, gpu=make_fake_gpu())
    assert result.returncode == ExitCode.SCRUB_BEFORE
    assert "quota shim is loaded into the launcher process" in result.stage("scrub-before")["error"]
