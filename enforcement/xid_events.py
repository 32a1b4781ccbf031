"""Launcher, beside the step: NVML's critical Xid events on the step's GPUs, for the step's duration.

Before the step starts, a thread registers an NVML event set for `nvmlEventTypeXidCriticalError`
on every physical GPU the launcher sees (the step's, in a pod), then waits on it in short slices
(`nvmlEventSetWait_v2`, `WAIT_MS`), so that `stop()` returns within one slice; the set is freed
when the thread ends. Each event is classified by the Xid table (`secureml.nvidia.xid`) and kept
for the audit record; one whose class means the device's memory can no longer be trusted (memory,
device) is handed at once to the receiver set with `deliver_to` (the watchdog, which stops the
step). `record_events` puts them into the audit record; `mark_scrub_unverified` says, after the
scrub, that its result cannot be trusted and that the device needs a reset.

A GPU that cannot report events (NVML answers not supported, or the container may not listen) is
recorded as such; the step runs on, as with the preflight's other "not supported" answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .audit import AuditRecord, StageRecord
from .preflight import mig_handles, nvml_session, physical_handles

WAIT_MS = 100  # one wait slice: the longest stop() waits for the thread
READY_TIMEOUT_S = 10.0
NO_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId/computeInstanceId when the event is the device's


class XidListener:
    """Listen for critical Xid events until `stop()`; `events` holds what arrived, classified."""

    def __init__(self) -> None:
        self._on_untrusted: Callable[[dict[str, Any]], None] | None = None
        self._pending: list[dict[str, Any]] = []  # untrusted events before a receiver was set
        self._deliver = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.devices: list[str] = []  # UUIDs registered
        self.unsupported: list[str] = []  # UUIDs that cannot report events
        self.error: str | None = None
        self._own_instances: dict[str, set[int]] = {}  # UUID -> the step's MIG GPU instances
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="secureml-xid-events", daemon=True)

    def start(self) -> None:
        """Start listening; return once the GPUs are registered (events from then on count)."""
        self._thread.start()
        self._ready.wait(READY_TIMEOUT_S)

    def deliver_to(self, on_untrusted: Callable[[dict[str, Any]], None]) -> None:
        """Hand every untrusted event (also those that came before this call) to `on_untrusted`."""
        with self._deliver:
            self._on_untrusted, pending = on_untrusted, self._pending
            self._pending = []
        for event in pending:
            on_untrusted(event)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def detail(self) -> dict[str, Any]:
        """For the run stage's entry: what was listened to, and how many events came."""
        return {
            "listening": bool(self.devices),
            "devices": self.devices,
            "unsupported": self.unsupported,
            "events": len(self.events),
            "error": self.error,
        }

    def _run(self) -> None:
        try:
            with nvml_session() as nvml:
                event_set = nvml.nvmlEventSetCreate()
                try:
                    self._register(nvml, event_set)
                    self._ready.set()
                    while self.devices and not self._stop.is_set():
                        try:
                            event = nvml.nvmlEventSetWait_v2(event_set, WAIT_MS)
                        except nvml.NVMLError_Timeout:
                            continue
                        self._arrived(nvml, event)
                finally:
                    nvml.nvmlEventSetFree(event_set)
        except Exception as err:  # noqa: BLE001 - recorded; the memory watchdog still guards the step
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self._ready.set()

    def _register(self, nvml: Any, event_set: Any) -> None:
        for _, handle in physical_handles(nvml):
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission):
                self.unsupported.append(uuid)
                continue
            self.devices.append(uuid)
            instances = set()
            for mig in mig_handles(nvml, handle):
                instances.add(int(nvml.nvmlDeviceGetGpuInstanceId(mig)))
            if instances:
                self._own_instances[uuid] = instances

    def _arrived(self, nvml: Any, event: Any) -> None:
        from secureml.nvidia.xid import classify

        row = classify(int(event.eventData))
        uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
        gi = int(event.gpuInstanceId)
        ci = int(event.computeInstanceId)
        own = self._own_instances.get(uuid)
        # on a MIG GPU an event of another GPU instance is that instance's, not this step's
        ours = gi == NO_INSTANCE or own is None or gi in own
        record: dict[str, Any] = {
            "xid": row.xid,
            "class": row.xid_class,
            "action": row.action,
            "mnemonic": row.mnemonic,
            "device": uuid,
            "gpu_instance_id": None if gi == NO_INSTANCE else gi,
            "compute_instance_id": None if ci == NO_INSTANCE else ci,
            "this_step": ours,
            "memory_untrusted": row.memory_untrusted and ours,
            "at": time.time(),
        }
        self.events.append(record)
        if record["memory_untrusted"]:
            with self._deliver:
                receiver = self._on_untrusted
                if receiver is None:
                    self._pending.append(record)
            if receiver is not None:
                receiver(record)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def record_events(record: AuditRecord, entry: StageRecord, listener: XidListener) -> bool:
    """Stop listening; the events into the record (`xid_events`, `device_reset`) and the run
    stage's entry (`xid_listener`). True when the device's memory can no longer be trusted."""
    listener.stop()
    entry["xid_listener"] = listener.detail()
    if not listener.events:
        return False
    record["xid_events"] = listener.events
    untrusted = [event for event in listener.events if event["memory_untrusted"]]
    if not untrusted:
        return False
    first = untrusted[0]
    record["device_reset"] = {
        "required": True,
        "devices": sorted({event["device"] for event in untrusted}),
        "xids": sorted({event["xid"] for event in untrusted}),
        "reason": f"Xid {first['xid']} ({first['class']}, {first['mnemonic']}): the device's memory "
        "can no longer be trusted; drain the node and reset the GPU before another step uses it",
    }
    return True


def mark_scrub_unverified(stages: list[StageRecord], record: AuditRecord) -> None:
    """After an untrusted event, the scrub-after result says it is unverified, and why."""
    reset = record.get("device_reset")
    if not reset:
        return
    for stage in stages:
        detail = stage.get("detail")
        if stage["name"] == "scrub-after" and detail is not None:
            detail["verified"] = False
            detail["unverified_reason"] = reset["reason"]
