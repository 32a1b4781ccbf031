"""The CUDA firewall in the audit record (issue 13 item 4): the launcher copies the shim's
`firewall_refused` into the record and turns a refusal into a `cuda-firewall` violation; the
step's exit code is its own (the shim already refused the call)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from secureml.core import contract
from tests.support.fakegpu import SHIM_DIR, FakeDevice, FakeGPU, MiB, build_native, build_shim

from .conftest import Launch

MakeGPU = Callable[..., FakeGPU]
PROBE_SOURCE = Path(__file__).parents[1] / "shim" / "firewall_probe.c"
LIMIT = 8 * MiB
NOT_PERMITTED = 800


def _env(shim_library: Path, tmp_path: Path, *, firewall: bool) -> dict[str, str]:
    limits = tmp_path / "podinfo" / "limits"
    limits.parent.mkdir(parents=True, exist_ok=True)
    limits.write_text(
        contract.render_shim_limits(
            memory_bytes=LIMIT, compute_percent=50, scrub_on_free=True, firewall=firewall
        )
    )
    limits.chmod(0o444)
    return {
        contract.ENV_ISOLATION: "timeslice-shim",
        contract.ENV_GPU_REQUEST: json.dumps({"kind": "timeslice", "memory": LIMIT, "compute": 50}),
        contract.ENV_SHIM_MODE: "enforce",
        contract.ENV_SHIM_LIMITS_FILE: str(limits),
        contract.ENV_SHIM_LIBRARY: str(shim_library),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
    }


@pytest.mark.parametrize("firewall", [True, False])
def test_firewall_refusals_reach_the_audit_record(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path, firewall: bool
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    probe = build_native(
        "firewall_probe",
        [PROBE_SOURCE],
        flags=(f"-I{SHIM_DIR}", f"-L{gpu.lib_dir}"),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )
    foreign = tmp_path / "foreign"  # a file no process of the step exported
    foreign.write_bytes(b"x")
    # Handles nobody in this step exported (another tenant's, as far as the shim can tell).
    command = [str(probe), "import", "ab" * 64, "cd" * 64, str(foreign)]
    result = launch(command, _env(build_shim(), tmp_path, firewall=firewall), gpu=gpu)

    record = result.record
    assert record["limits"]["firewall"] is firewall
    assert record["shim_counters"]["firewall"] is firewall
    firewall_violations = [v for v in record["violations"] if v["kind"] == "cuda-firewall"]
    if firewall:
        assert json.loads(result.stdout)["ipc_mem"] == NOT_PERMITTED
        assert record["firewall_refused"] == 3
        assert firewall_violations == [{"kind": "cuda-firewall", "count": 3, "action": "refused"}]
        assert "CUDA firewall refused 3" in result.stderr
    else:
        assert record["firewall_refused"] == 0
        assert firewall_violations == []
    assert record["exit_code"] == result.returncode == 0, result.stderr
