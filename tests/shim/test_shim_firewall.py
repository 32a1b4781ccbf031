"""The CUDA firewall (`firewall=1` in the limits file; issue 13 item 4): a step's process imports
memory and events only from the step's own exports (CUDA IPC, POSIX-fd shareable handles), and
reaches peers only on devices the step has an account on. Refusals are CUDA_ERROR_NOT_PERMITTED
(800) and counted in the counters file (`firewall_refused`) for the audit record."""

from __future__ import annotations

import json
import subprocess

from tests.support.fakegpu import SHIM_DIR, MiB, build_native

from .shimstep import HERE, Step

NOT_PERMITTED = 800


def _probe(step: Step):
    return build_native(
        "firewall_probe",
        [HERE / "firewall_probe.c"],
        flags=(f"-I{SHIM_DIR}", f"-L{step.gpu.lib_dir}"),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )


def _import(step: Step, probe, exported: dict) -> dict:
    result = subprocess.run(
        [str(probe), "import", exported["mem"], exported["event"], exported["fd"]],
        env=step.env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_imports_only_from_the_steps_own_exports(make_step) -> None:
    mine = make_step(memory=16 * MiB, firewall=True)
    probe = _probe(mine)
    exporter = subprocess.Popen(
        [str(probe), "export"],
        env=mine.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        exported = json.loads(exporter.stdout.readline())
        # A process of the same step imports all three.
        assert _import(mine, probe, exported) == {"ipc_mem": 0, "ipc_event": 0, "shareable_fd": 0}
        # Another tenant's step on the same GPU (its own limits file, so its own account): refused.
        other = make_step(memory=16 * MiB, firewall=True, gpu=mine.gpu)
        refused = {
            "ipc_mem": NOT_PERMITTED,
            "ipc_event": NOT_PERMITTED,
            "shareable_fd": NOT_PERMITTED,
        }
        assert _import(other, probe, exported) == refused
        assert other.counters()["firewall_refused"] == 3 and other.counters()["firewall"] is True
        # Control: with the firewall off the same imports reach the driver and succeed.
        open_step = make_step(memory=16 * MiB, firewall=False, gpu=mine.gpu)
        assert _import(open_step, probe, exported) == {
            "ipc_mem": 0,
            "ipc_event": 0,
            "shareable_fd": 0,
        }
    finally:
        exporter.stdin.close()
        exporter.wait(timeout=10)
    assert mine.counters()["firewall_refused"] == 0


def test_peer_access_only_to_devices_of_the_step(make_step) -> None:
    step = make_step(memory=16 * MiB, devices=2, firewall=True)
    got = json.loads(
        subprocess.run(
            [str(_probe(step)), "peer"], env=step.env(), capture_output=True, text=True, timeout=30
        ).stdout
    )
    assert got == {
        "can_before": 0,
        "enable_before": NOT_PERMITTED,
        "can_after": 1,
        "enable_after": 0,
    }
    assert step.counters()["firewall_refused"] == 1
    unguarded = make_step(memory=16 * MiB, devices=2)  # no firewall key: off
    got = json.loads(
        subprocess.run(
            [str(_probe(unguarded)), "peer"],
            env=unguarded.env(),
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    )
    assert got["can_before"] == 1 and got["enable_before"] == 0
