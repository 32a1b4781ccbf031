"""Launcher stage 5 (beside the child): real GPU memory use of the step, from NVML, against its limit.

A thread polls NVML's per-process memory on every visible device, sums it over the child's process
tree (its descendants and its session), and keeps the peak. On a shared GPU with a memory limit, a
step whose use exceeds the limit is stopped: SIGTERM to its process group, SIGKILL after the grace
period; the violation is recorded. The shim limits what the step allocates through the hooked
driver calls; the watchdog catches what went around it (a static CUDA, an unhooked entry point).
Where it enforces a limit it fails closed: if NVML stops answering mid-run, the limit can no longer
be checked, so the step is stopped the same way and the violation says why (`watchdog-lost`).

NVML reports host PIDs. Where the container has its own PID namespace and the driver does not
translate them, no process matches and the use reads 0: docs/launcher.md lists this limit.

The watchdog also stops the step on a device fault: the Xid listener (`xid_events`) calls
`device_fault` with an event after which the device's memory cannot be trusted (violation
`device-fault`, launcher exit 79). Every pid seen in the step's process tree is kept (`pids`), for
the audit record: `secureml doctor logs` names the step an Xid's pid belonged to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from .preflight import mig_handles, nvml_session, physical_handles


def process_tree(root: int) -> set[int]:
    """`root`, its descendants, and every process in its session, from /proc."""
    parents: dict[int, int] = {}
    sessions: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the parenthesised command: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
        sessions[int(entry.name)] = int(fields[3])
    tree = {root} | {pid for pid, sid in sessions.items() if sid == root}
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        grew = bool(children)
        tree |= children
    return tree


class Watchdog:
    """Poll the child's GPU memory; stop the child when it exceeds `limit_bytes` (if any)."""

    def __init__(
        self,
        child: subprocess.Popen[bytes],
        *,
        limit_bytes: int | None,
        interval_s: float,
        grace_s: float,
    ) -> None:
        self.child = child
        self.limit_bytes = limit_bytes
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.peak_bytes = 0
        self.samples = 0
        self.violations: list[dict[str, Any]] = []
        self.error: str | None = None
        self.pids: set[int] = {child.pid}
        self._stopping = threading.Lock()  # one stop at a time: the memory check or a device fault
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="secureml-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _usage(self, nvml: Any, handles: list[Any]) -> tuple[int, dict[int, int]]:
        tree = process_tree(self.child.pid)
        self.pids |= tree
        per_pid: dict[int, int] = {}
        for handle in handles:
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in tree:
                    per_pid[proc.pid] = per_pid.get(proc.pid, 0) + int(proc.usedGpuMemory or 0)
        return sum(per_pid.values()), per_pid

    def _run(self) -> None:
        try:
            with nvml_session() as nvml:
                handles = []
                for _, gpu in physical_handles(nvml):
                    handles.extend(mig_handles(nvml, gpu) or [gpu])
                while not self._stop.is_set() and self.child.poll() is None:
                    used, per_pid = self._usage(nvml, handles)
                    self.samples += 1
                    self.peak_bytes = max(self.peak_bytes, used)
                    if self.limit_bytes is not None and used > self.limit_bytes:
                        self._stop_child(
                            kind="gpu-memory",
                            used_bytes=used,
                            processes={str(pid): size for pid, size in per_pid.items()},
                        )
                        return
                    self._stop.wait(self.interval_s)
        except Exception as err:  # noqa: BLE001 - any NVML failure mid-run is recorded, and where a limit is enforced it stops the step
            self.error = f"{type(err).__name__}: {err}"
            if (
                self.limit_bytes is not None
                and not self._stop.is_set()
                and self.child.poll() is None
            ):
                self._stop_child(kind="watchdog-lost", error=self.error)

    def device_fault(self, event: dict[str, Any]) -> None:
        """An Xid after which the device's memory cannot be trusted: stop the step."""
        keys = ("xid", "class", "mnemonic", "device", "gpu_instance_id")
        self._stop_child(kind="device-fault", **{key: event.get(key) for key in keys})

    def _stop_child(self, *, kind: str, **details: Any) -> None:
        """Record a violation of `kind` and stop the child's process group."""
        with self._stopping:
            self._stop_locked(kind, details)

    def _stop_locked(self, kind: str, details: dict[str, Any]) -> None:
        already = self.child.poll() is not None or any(
            v["action"].startswith("SIGTERM") for v in self.violations
        )
        violation: dict[str, Any] = {
            "kind": kind,
            "limit_bytes": self.limit_bytes,
            **details,
            "at": time.time(),
            "action": "already stopping" if already else "SIGTERM",
        }
        self.violations.append(violation)
        if already:
            return
        _signal_group(self.child, signal.SIGTERM)
        # poll, not wait: the launcher's main thread is blocked in wait() on the same child
        deadline = time.monotonic() + self.grace_s
        while self.child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.child.poll() is None:
            violation["action"] = "SIGTERM, SIGKILL"
            _signal_group(self.child, signal.SIGKILL)


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's process group (the child leads its own session)."""
    try:
        os.killpg(child.pid, signum)
    except ProcessLookupError:
        pass
