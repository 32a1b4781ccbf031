"""The launcher sees driver events: NVML's critical Xids on the step's GPU while it runs.

On the fake NVML (no GPU is lent to this suite): a test injects an Xid while the step runs
(`FakeGPU.inject_xid`, which the fake's `nvmlEventSetWait_v2` delivers to the sets registered at
that moment). Memory and device Xids stop the step (exit 79) and leave the scrub unverified;
application Xids are recorded and the step goes on; no event, nothing in the record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from tests.support.fakegpu import FakeDevice, FakeGPU, FakeMig, MiB

from .conftest import Launch, LaunchResult

MakeGPU = Callable[..., FakeGPU]
CUDA_STEP = str(Path(__file__).with_name("cuda_step.py"))


def _env() -> dict[str, str]:
    return {
        contract.ENV_ISOLATION: "timeslice",
        contract.ENV_GPU_REQUEST: json.dumps(
            {"kind": "timeslice", "memory": 64 * MiB, "compute": 50}
        ),
        contract.ENV_WATCHDOG_INTERVAL: "0.05",
        contract.ENV_WATCHDOG_GRACE: "2",
        contract.ENV_SCRUB_AFTER: "true",
    }


def _run_with_xid(
    launch: Launch, gpu: FakeGPU, ready: Path, xid: int | None, hold: float
) -> LaunchResult:
    """Run a step that signals `ready`, then holds the GPU for `hold` s; inject `xid` once ready."""

    def inject() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if xid is not None:
            gpu.inject_xid(xid)

    injector = threading.Thread(target=inject)
    injector.start()
    command = [sys.executable, CUDA_STEP, "--alloc", str(MiB), "--ready", str(ready)]
    result = launch([*command, "--hold", str(hold)], _env(), gpu=gpu)
    injector.join()
    return result


def test_an_ecc_xid_stops_the_step_with_79(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    started = time.monotonic()
    result = _run_with_xid(launch, gpu, tmp_path / "ready", 48, hold=60)

    assert result.returncode == ExitCode.DEVICE_FAULT == 79, result.stderr
    assert time.monotonic() - started < 30
    record = result.record
    (event,) = record["xid_events"]
    assert (event["xid"], event["class"], event["device"]) == (48, "memory", gpu.devices[0].uuid)
    assert event["memory_untrusted"] is True and event["gpu_instance_id"] is None
    (violation,) = record["violations"]
    assert (violation["kind"], violation["xid"], violation["action"]) == (
        "device-fault",
        48,
        "SIGTERM",
    )
    assert record["child_exit_code"] == 128 + 15
    reset = record["device_reset"]
    assert reset["required"] is True and reset["devices"] == [gpu.devices[0].uuid]
    assert reset["xids"] == [48] and "reset the GPU" in reset["reason"]
    scrub = result.stage("scrub-after")
    assert scrub["status"] == "ok"  # it still zeroes what it can reach ...
    assert scrub["detail"]["verified"] is False  # ... but cannot vouch for it
    assert "Xid 48" in scrub["detail"]["unverified_reason"]
    assert result.stage("run")["xid_listener"]["events"] == 1
    assert "Xid 48 (memory)" in result.stderr


def test_an_application_xid_is_recorded_and_the_step_goes_on(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    result = _run_with_xid(launch, gpu, tmp_path / "ready", 13, hold=1.5)

    assert result.returncode == 0, result.stderr
    record = result.record
    (event,) = record["xid_events"]
    assert (event["xid"], event["class"], event["action"]) == (13, "application", "restart-step")
    assert event["memory_untrusted"] is False
    assert record["violations"] == [] and "device_reset" not in record
    assert "verified" not in result.stage("scrub-after")["detail"]


def test_no_event_leaves_nothing_in_the_record(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=128 * MiB)])
    result = _run_with_xid(launch, gpu, tmp_path / "ready", None, hold=0.2)

    assert result.returncode == 0, result.stderr
    record = result.record
    assert "xid_events" not in record and "device_reset" not in record
    listener = result.stage("run")["xid_listener"]
    assert listener == {
        "listening": True,
        "devices": [gpu.devices[0].uuid],
        "unsupported": [],
        "events": 0,
        "error": None,
    }
    assert record["pids"] and all(isinstance(pid, int) for pid in record["pids"])


FAKE_LISTENER = r"""
import sys, pynvml
pynvml.nvmlInit()
event_set = pynvml.nvmlEventSetCreate()
pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, event_set)
print("ready", flush=True)
sys.stdin.readline()
for _ in range(2):
    event = pynvml.nvmlEventSetWait_v2(event_set, 2000)
    print(event.eventData, pynvml.nvmlDeviceGetIndex(event.device), event.gpuInstanceId, flush=True)
try:
    pynvml.nvmlEventSetWait_v2(event_set, 50)
except pynvml.NVMLError_Timeout:
    print("timeout", flush=True)
pynvml.nvmlEventSetFree(event_set)
"""


def test_the_fake_delivers_injected_xids_to_sets_registered_for_the_device(
    make_fake_gpu: MakeGPU,
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(), FakeDevice()])
    gpu.inject_xid(31, 1)  # before the set exists: not its event
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_LISTENER],
        env=gpu.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    gpu.inject_xid(13, 0)  # another device: not registered
    gpu.inject_xid(48, 1, gpu_instance=2, compute_instance=0)
    gpu.inject_xid(79, 1)
    out, _ = proc.communicate("go\n", timeout=30)
    assert out.split("\n")[:3] == ["48 1 2", f"79 1 {0xFFFFFFFF}", "timeout"]


LISTENER = r"""
import json, sys, time
from secureml.enforcement.xid_events import XidListener
stops = []
listener = XidListener()
listener.start()
listener.deliver_to(stops.append)
print("ready", flush=True)
sys.stdin.readline()
time.sleep(0.5)
listener.stop()
print(json.dumps({"events": listener.events, "stops": stops, "detail": listener.detail()}))
"""


def test_on_a_mig_gpu_another_instances_xid_is_recorded_but_does_not_stop(
    make_fake_gpu: MakeGPU,
) -> None:
    gpu = make_fake_gpu(
        devices=[FakeDevice(memory=128 * MiB, mig_mode=True, migs=[FakeMig(gi=1), FakeMig(gi=2)])]
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER],
        env=gpu.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    gpu.inject_xid(94, gpu_instance=9, compute_instance=0)  # not an instance this process sees
    gpu.inject_xid(48, gpu_instance=2, compute_instance=0)  # one of its own
    out, _ = proc.communicate("go\n", timeout=30)
    result = json.loads(out)
    other, own = result["events"]
    assert (other["xid"], other["this_step"], other["memory_untrusted"]) == (94, False, False)
    assert (own["xid"], own["gpu_instance_id"], own["memory_untrusted"]) == (48, 2, True)
    assert [event["xid"] for event in result["stops"]] == [48]
    assert result["detail"]["listening"] is True and result["detail"]["events"] == 2
