"""The shim stage: limits checked against the request, the shim armed in the child only.

The shim is the real `libsecureml_shim.so` built from enforcement/shim/ (engineer D's C), the
driver the fake one; the step allocates through CUDA and the shim refuses what exceeds its limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from tests.support.fakegpu import FakeDevice, FakeGPU, MiB, build_shim

from .conftest import Launch, launcher_env

MakeGPU = Callable[..., FakeGPU]
CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))
LIMIT = 8 * MiB


@pytest.fixture
def shim_library() -> Path:
    return build_shim()


def _limits_file(tmp_path: Path, memory: int = LIMIT, compute: int = 50) -> Path:
    path = tmp_path / "podinfo" / "limits"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        contract.render_shim_limits(
            memory_bytes=memory, compute_percent=compute, scrub_on_free=True
        )
    )
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

    assert result.returncode == 1, (
        result.stderr
    )  # the step's own failure: its allocation was refused
    assert "cuMemAlloc failed with CUDA error 2" in result.stderr
    record = result.record
    assert record["limits"] == {
        "memory": LIMIT,
        "compute": 50,
        "scrub_on_free": True,
        "firewall": False,
        "source": str(tmp_path / "podinfo" / "limits"),
    }
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
    result = launch(
        [sys.executable, "-c", code], _env(shim_library, _limits_file(tmp_path)), gpu=gpu
    )

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
        _env(shim_library, tmp_path / "absent" / "limits"),
        gpu=gpu,
    )
    assert result.returncode == ExitCode.SHIM
    assert not marker.exists()
    assert "cannot read the shim limits file" in result.stage("shim")["error"]


def test_limits_that_differ_from_the_request_fail_closed(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu()
    result = launch(
        [sys.executable, "-c", "pass"],
        _env(shim_library, _limits_file(tmp_path, memory=64 * MiB)),
        gpu=gpu,
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
        [sys.executable, "-c", "pass"],
        _env(tmp_path / "no-shim.so", _limits_file(tmp_path)),
        gpu=make_fake_gpu(),
    )
    assert result.returncode == ExitCode.SHIM
    assert "not built" in result.stage("shim")["error"]


def test_shim_off_on_a_time_sliced_gpu_is_recorded(launch: Launch, make_fake_gpu: MakeGPU) -> None:
    env = {
        contract.ENV_ISOLATION: "timeslice",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "timeslice", "memory": LIMIT, "compute": 50}),
    }
    result = launch(
        [sys.executable, "-c", "import os; print(os.environ.get('LD_PRELOAD', ''))"],
        env,
        gpu=make_fake_gpu(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    assert result.stage("shim") == {
        "name": "shim",
        "status": "skipped",
        "reason": "off in the profile",
        "seconds": 0.0,
    }


def test_scrub_refuses_to_run_where_the_shim_enforces(
    make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    # a process with the shim preloaded that never claimed the launcher's role: the shim enforces there
    gpu = make_fake_gpu()
    env = launcher_env(
        {
            "LD_PRELOAD": str(shim_library),
            contract.ENV_SHIM_LIMITS_FILE: str(_limits_file(tmp_path)),
        },
        gpu,
    )
    code = "from secureml.enforcement.scrub import scrub_devices; scrub_devices('sample')"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0
    assert "the quota shim enforces its limits in the launcher process" in proc.stderr


# A step process that asks for the launcher's role: it prints the shim's answer and its mode, then
# runs the CUDA step given in argv.
CLAIMING_STEP = """
import ctypes, subprocess, sys
shim = ctypes.CDLL(None)
why = ctypes.create_string_buffer(256)
print("claim", shim.secureml_shim_claim_launcher(why, len(why)), why.value.decode(), flush=True)
print("mode", shim.secureml_shim_mode(), flush=True)
within = subprocess.run([sys.executable, sys.argv[1], "--alloc", sys.argv[2], "--report-nonzero", "--fill", "0x5a"])
above = subprocess.run([sys.executable, sys.argv[1], "--alloc", sys.argv[3]])
sys.exit(within.returncode or above.returncode)
"""


def test_launcher_with_the_shim_preloaded_works_unlimited_while_its_step_is_limited(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    # LD_PRELOAD on the launcher stands in for /etc/ld.so.preload: the shim is in every process,
    # the launcher's included; residue of a previous tenant fills the device.
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB, residue=0xA5)])
    env = _env(
        shim_library,
        _limits_file(tmp_path),
        **{
            contract.ENV_SCRUB_BEFORE: "true",
            contract.ENV_SCRUB_AFTER: "true",
            "LD_PRELOAD": str(shim_library),
        },
    )
    command = [sys.executable, "-c", CLAIMING_STEP, CUDA_STEP, str(4 * MiB), str(16 * MiB)]
    result = launch(command, env, gpu=gpu)

    assert result.returncode == 1, result.stderr  # the step's own failure: the 16 MiB were refused
    assert "cuMemAlloc failed with CUDA error 2" in result.stderr  # CUDA_ERROR_OUT_OF_MEMORY
    record = result.record
    claim = result.stage("shim-claim")
    assert claim["status"] == "ok" and claim["detail"]["how"] == "preloaded"
    assert claim["detail"]["library"] == str(shim_library)
    assert claim["detail"]["dumpable"] is False  # the step cannot ptrace the pass-through launcher
    launcher_pid = claim["detail"]["pid"]
    # the launcher's own GPU work saw the device, not the step's 8 MiB
    assert [d["memory_total"] for d in result.stage("preflight")["detail"]["devices"]] == [
        128 * MiB
    ]
    assert result.stage("scrub-before")["detail"]["zeroed_bytes"] == 128 * MiB
    assert result.stage("scrub-after")["detail"]["zeroed_bytes"] == 128 * MiB
    assert result.stage("shim")["detail"]["preloaded"] is True
    # the step's process asked for the launcher's role and was refused; it stayed enforced
    lines = result.stdout.splitlines()
    assert (
        lines[0] == f"claim -1 process {launcher_pid} already holds the launcher role of this step"
    )
    assert lines[1] == "mode 1"
    assert lines[2] == "0"  # scrub-before removed the residue the step would have found
    counters = record["shim_counters"]
    assert counters["launcher_pid"] == launcher_pid
    assert counters["launcher_claims_refused"] == 1
    assert counters["refused"] >= 1 and counters["peak"] == 4 * MiB
    assert {
        "kind": "shim-launcher-claim",
        "count": 1,
        "launcher_pid": launcher_pid,
        "action": "refused",
    } in record["violations"]
    assert gpu.read_memory().count(0) == 128 * MiB  # scrub-after left nothing of the step's data


def test_launcher_takes_its_role_where_the_shim_is_not_preloaded(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    command = [sys.executable, "-c", CLAIMING_STEP, CUDA_STEP, str(4 * MiB), str(16 * MiB)]
    result = launch(command, _env(shim_library, _limits_file(tmp_path)), gpu=gpu)

    assert result.returncode == 1, result.stderr
    assert result.stage("shim-claim")["status"] == "skipped"
    launcher = result.record["shim_launcher"]
    assert launcher["how"] == "private"
    assert result.stdout.splitlines()[:2] == [
        f"claim -1 process {launcher['pid']} already holds the launcher role of this step",
        "mode 1",
    ]
    assert result.record["shim_counters"]["launcher_claims_refused"] == 1


def test_a_second_launcher_is_refused_its_role(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    # an earlier process took the launcher's role in this step's region (and exited): the role is
    # never handed over, so the launcher fails closed before any GPU stage or the command
    gpu = make_fake_gpu()
    limits = _limits_file(tmp_path)
    squatter = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ctypes, os; print(os.getpid(), ctypes.CDLL(None).secureml_shim_claim_launcher(None, 0))",
        ],
        env=launcher_env(
            {"LD_PRELOAD": str(shim_library), contract.ENV_SHIM_LIMITS_FILE: str(limits)}, gpu
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    squatter_pid, claimed = squatter.stdout.split()
    assert claimed == "0", squatter.stderr
    marker = tmp_path / "ran"
    env = _env(shim_library, limits, **{"LD_PRELOAD": str(shim_library)})
    result = launch([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env, gpu=gpu)

    assert result.returncode == ExitCode.SHIM
    assert not marker.exists()
    error = result.stage("shim-claim")["error"]
    assert f"process {squatter_pid} already holds the launcher role of this step" in error
    assert result.stage("preflight")["status"] == "skipped"


def test_the_shim_leaves_no_folder_in_tmp(
    launch: Launch, make_fake_gpu: MakeGPU, shim_library: Path, tmp_path: Path
) -> None:
    """The counters file's private folder (`$TMPDIR/secureml-shim-*`) goes with the step."""
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env(shim_library, _limits_file(tmp_path), TMPDIR=str(tmp))
    result = launch([sys.executable, CUDA_STEP, "--alloc", str(1 * MiB)], env, gpu=gpu)
    assert result.returncode == 0, result.stderr
    counters = Path(result.stage("shim")["detail"]["counters_file"])
    assert counters.parent.parent == tmp and counters.parent.name.startswith("secureml-shim-")
    assert result.record["shim_counters"] is not None, "the counters were read before removal"
    assert list(tmp.glob("secureml-shim-*")) == []
