"""Launcher stage 2: check through NVML that the GPU this step sees is the one it asked for.

What is checked (one `PreflightError` per mismatch, naming the device and the rule):
- the visible devices match the request: the MIG instances' profile, count and memory; the number
  and product of whole GPUs (none of them in MIG mode); exactly one device for a time-sliced share,
  large enough for the share's memory;
- every physical GPU behind them is healthy: no retired pages pending, no pending row remapping or
  remapping failure, no critical XID event reported while the check listens;
- on a dedicated GPU, no other process holds a context.

Visibility follows `CUDA_VISIBLE_DEVICES` when it lists indices or UUIDs (what CUDA itself will
use); in a pod the container runtime already hides every other device. The driver and CUDA
versions are recorded. NVML reports a MIG instance's profile only in its name
(`NVIDIA H100 80GB HBM3 MIG 1g.10gb`), so that is where the profile is read.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.gpu.request import MIG, GPURequest, TimeSlice, WholeGPU

from . import driver

# A MIG instance's memory may differ from the GB its profile name promises (GiB vs GB, reserved
# pages): on A100/H100/H200 the reported size is within this fraction of the nominal size.
MIG_MEMORY_TOLERANCE = 0.15
XID_LISTEN_MS = 50
_MIG_NAME = re.compile(r"\bMIG\s+(\S+)\s*$")


class PreflightError(SecuremlError):
    """The GPU this step sees is not the one it asked for, or is not healthy."""


NVML_LIBRARY = "libnvidia-ml.so.1"


@dataclass(frozen=True)
class VisibleDevice:
    """One device the step will use: a whole GPU, or a MIG instance (with its parent's UUID)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    mig_profile: str | None = None
    parent_uuid: str | None = None


@contextmanager
def nvml_session() -> Iterator[Any]:
    """`pynvml`, initialised, shut down on exit; a `PreflightError` when NVML cannot start."""
    try:
        import pynvml
    except ImportError:
        raise PreflightError(
            "nvidia-ml-py (pynvml) is not installed in the step's image",
            why="the GPU checks read the device through NVML",
            fix="install secureml in the step's image (nvidia-ml-py is one of its dependencies)",
        ) from None
    try:
        if pynvml.nvmlLib is None:  # the node's copy, never the image's (enforcement/driver.py)
            pynvml.nvmlLib = ctypes.CDLL(driver.library(NVML_LIBRARY))
    except OSError as err:
        raise PreflightError(
            f"NVML did not start: {err}",
            why="the launcher reads the GPU only through the driver the node mounted",
            fix="check that the pod requested a GPU and the NVIDIA container runtime mounted the driver",
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise PreflightError(
            f"NVML did not start: {err}",
            why="without NVML the launcher cannot see which GPU this step was given",
            fix="check that the pod requested a GPU and the NVIDIA container runtime mounted the driver",
        ) from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_visible() -> list[str] | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() in ("", "all"):
        return None
    return [item.strip() for item in raw.split(",") if item.strip()]


def physical_handles(nvml: Any) -> list[tuple[int, Any]]:
    """`(index, handle)` of every physical GPU NVML shows."""
    return [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]


def mig_handles(nvml: Any, parent: Any) -> list[Any]:
    """The MIG instances of `parent`, `[]` when MIG mode is off or unsupported."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(parent)
    except nvml.NVMLError_NotSupported:
        return []
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return []
    found = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot))
        except nvml.NVMLError_NotFound:
            continue
    return found


def _describe(nvml: Any, index: int, handle: Any, parent_uuid: str | None = None) -> VisibleDevice:
    name = _text(nvml.nvmlDeviceGetName(handle))
    profile = None
    if parent_uuid is not None:
        match = _MIG_NAME.search(name)
        profile = match.group(1) if match else None
    return VisibleDevice(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=name,
        memory_total=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        mig_profile=profile,
        parent_uuid=parent_uuid,
    )


def visible_devices(
    nvml: Any,
) -> tuple[list[tuple[Any, VisibleDevice]], list[tuple[Any, VisibleDevice]]]:
    """`(gpus, migs)`: visible physical GPUs and visible MIG instances, each with its NVML handle.

    A GPU in MIG mode counts as visible when it or any of its instances is.
    """
    wanted = _cuda_visible()
    gpus, migs = [], []
    for index, handle in physical_handles(nvml):
        gpu = _describe(nvml, index, handle)
        instances = [
            (mig, _describe(nvml, slot, mig, parent_uuid=gpu.uuid))
            for slot, mig in enumerate(mig_handles(nvml, handle))
        ]
        if wanted is not None:
            gpu_listed = str(index) in wanted or gpu.uuid in wanted
            instances = [(h, d) for h, d in instances if gpu_listed or d.uuid in wanted]
            if not gpu_listed and not instances:
                continue
        gpus.append((handle, gpu))
        migs.extend(instances)
    return gpus, migs


def _fail(what: str, *, why: str, fix: str, device: VisibleDevice | None = None) -> PreflightError:
    where = f"GPU {device.index} ({device.uuid})" if device else "GPU preflight"
    return PreflightError(what, why=why, fix=fix, where=where)


def _product_label(name: str) -> str:
    """The node-label spelling of a product name (`NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`)."""
    return "-".join(name.split())


def check_request(
    request: GPURequest,
    gpus: list[VisibleDevice],
    migs: list[VisibleDevice],
) -> list[VisibleDevice]:
    """The devices this step uses, after checking they match `request`; `PreflightError` if not."""
    if isinstance(request, MIG):
        if len(migs) != request.count:
            raise _fail(
                f"{len(migs)} MIG instance(s) visible, the step requested {request.count} "
                f"of profile {request.profile}",
                why="the step must run on exactly the MIG instances it was scheduled for",
                fix="check the pod's MIG resource (nvidia.com/mig-<profile>) and the node's MIG layout",
            )
        nominal = request.memory_gb * 10**9
        for mig in migs:
            if mig.mig_profile != request.profile:
                raise _fail(
                    f"MIG instance {mig.uuid} has profile {mig.mig_profile or 'unknown'} "
                    f"({mig.name}), the step requested {request.profile}",
                    why="a different profile means a different share of memory and compute",
                    fix="check the node's MIG configuration and the resource the pod requested",
                    device=mig,
                )
            if abs(mig.memory_total - nominal) > MIG_MEMORY_TOLERANCE * nominal:
                raise _fail(
                    f"MIG instance {mig.uuid} has {mig.memory_total} bytes of memory, profile "
                    f"{request.profile} promises about {nominal}",
                    why="the instance's memory does not match its profile: the layout is not what NVML names",
                    fix="recreate the node's MIG instances (nvidia-smi mig) or drain the node",
                    device=mig,
                )
        return migs
    if isinstance(request, WholeGPU):
        if len(gpus) != request.count:
            raise _fail(
                f"{len(gpus)} GPU(s) visible, the step requested {request.count} whole GPU(s)",
                why="a dedicated step must see exactly the GPUs it was given",
                fix="check the pod's nvidia.com/gpu limit and CUDA_VISIBLE_DEVICES",
            )
        if migs:
            raise _fail(
                f"GPU {migs[0].parent_uuid} is in MIG mode, the step requested a whole GPU",
                why="a whole-GPU step must own the entire device, not a MIG partition of it",
                fix="schedule the step on a node pool whose GPUs have MIG disabled",
                device=migs[0],
            )
        for gpu in gpus:
            if request.product and _product_label(gpu.name) != _product_label(request.product):
                raise _fail(
                    f"GPU {gpu.uuid} is a {gpu.name}, the step requested {request.product}",
                    why="the step was compiled for a specific GPU product",
                    fix="check the node selector (nvidia.com/gpu.product) of the step's pod",
                    device=gpu,
                )
        return gpus
    assert isinstance(request, TimeSlice)
    shared = migs or gpus
    if len(shared) != 1:
        raise _fail(
            f"{len(shared)} GPU device(s) visible, a time-sliced step must see exactly one",
            why="the launcher checks and limits one shared device; others would run unchecked",
            fix="request one shared GPU, or set CUDA_VISIBLE_DEVICES to one device",
        )
    device = shared[0]
    if device.memory_total < request.memory:
        raise _fail(
            f"GPU {device.uuid} has {device.memory_total} bytes of memory, less than the "
            f"step's share of {request.memory}",
            why="the share cannot be honoured on this device",
            fix="lower the TimeSlice memory or schedule the step on a larger GPU",
            device=device,
        )
    return shared


def _unavailable(nvml: Any) -> tuple[type[Exception], ...]:
    """Errors that mean "NVML cannot tell here" (old GPU, no permission in the container): recorded."""
    return (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission)


def _health(nvml: Any, handle: Any, gpu: VisibleDevice) -> dict[str, Any]:
    """Retired pages, row remapping and critical XID events of one physical GPU."""
    health: dict[str, Any] = {}
    try:
        pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        health["retired_pages_pending"] = bool(pending)
    except _unavailable(nvml):
        health["retired_pages_pending"] = "not supported"
    if health["retired_pages_pending"] is True:
        raise _fail(
            "the GPU has retired memory pages pending",
            why="pages retire only at the next GPU reset; until then bad memory stays in use",
            fix="drain the node and reset the GPU (nvidia-smi -r)",
            device=gpu,
        )
    try:
        _corr, _unc, remap_pending, remap_failed = nvml.nvmlDeviceGetRemappedRows(handle)
        health["row_remap_pending"] = bool(remap_pending)
        health["row_remap_failure"] = bool(remap_failed)
    except _unavailable(nvml):
        health["row_remap_pending"] = health["row_remap_failure"] = "not supported"
    if health["row_remap_pending"] is True or health["row_remap_failure"] is True:
        state = "failed" if health["row_remap_failure"] is True else "is pending"
        raise _fail(
            f"memory row remapping {state} on this GPU",
            why="the GPU's memory has uncorrectable errors that are not yet (or cannot be) repaired",
            fix="drain the node and reset the GPU; replace it if remapping failed",
            device=gpu,
        )
    xid = _pending_xid(nvml, handle)
    health["xid"] = xid
    if isinstance(xid, int):
        raise _fail(
            f"the GPU reported critical XID error {xid}",
            why="after a critical XID the GPU's state (and other tenants' data) cannot be trusted",
            fix="drain the node and check `dmesg` for NVRM Xid messages; reset the GPU",
            device=gpu,
        )
    return health


def _pending_xid(nvml: Any, handle: Any) -> int | str | None:
    """A critical XID reported while listening briefly, `None` if none, or "not supported"
    (also where the container may not listen)."""
    try:
        event_set = nvml.nvmlEventSetCreate()
    except _unavailable(nvml):
        return "not supported"
    try:
        try:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
        except _unavailable(nvml):
            return "not supported"
        try:
            event = nvml.nvmlEventSetWait_v2(event_set, XID_LISTEN_MS)
        except nvml.NVMLError_Timeout:
            return None
        return int(event.eventData)
    finally:
        nvml.nvmlEventSetFree(event_set)


def _foreign_processes(nvml: Any, handle: Any) -> list[dict[str, int]]:
    own = os.getpid()
    found = []
    for query in (
        nvml.nvmlDeviceGetComputeRunningProcesses,
        nvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        try:
            processes = query(handle)
        except nvml.NVMLError_NotSupported:
            continue
        for proc in processes:
            if proc.pid != own:
                found.append({"pid": int(proc.pid), "used_memory": int(proc.usedGpuMemory or 0)})
    return found


def _cuda_version(nvml: Any) -> str:
    version = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
    return f"{version // 1000}.{version % 1000 // 10}"


def run_preflight(
    request: GPURequest, *, isolation: str, confidential_computing: bool = False
) -> dict[str, Any]:
    """Check the visible GPUs against `request`; the audit record's `gpu` section on success.

    With `confidential_computing` the machine's GPUs must also be in CC mode and ready
    (`confidential.require_confidential`), checked before anything else."""
    with nvml_session() as nvml:
        confidential: dict[str, Any] = {"required": False}
        if confidential_computing:
            from .confidential import ConfidentialComputingError, require_confidential

            try:
                confidential = require_confidential(nvml)
            except ConfidentialComputingError as err:
                raise PreflightError(err.what, why=err.why, fix=err.fix, where=err.where) from None
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(nvml)
        gpus, migs = visible_devices(nvml)
        if not gpus:
            raise _fail(
                "NVML shows no GPU visible to this step",
                why=f"the step requested {request.to_json()}",
                fix="check the pod's GPU resource and CUDA_VISIBLE_DEVICES",
            )
        used = check_request(request, [d for _, d in gpus], [d for _, d in migs])
        used_parents = {d.parent_uuid or d.uuid for d in used}
        health = {}
        for handle, gpu in gpus:
            if gpu.uuid not in used_parents:
                continue
            health[gpu.uuid] = _health(nvml, handle, gpu)
            if isolation == "dedicated" or isinstance(request, WholeGPU):
                foreign = _foreign_processes(nvml, handle)
                if foreign:
                    raise _fail(
                        f"{len(foreign)} other process(es) already use this dedicated GPU: "
                        + ", ".join(f"pid {p['pid']}" for p in foreign),
                        why="a dedicated GPU must not be shared with any other workload",
                        fix="find who else was scheduled on this GPU (nvidia-smi) and drain the node",
                        device=gpu,
                    )
        return {
            "driver_version": driver,
            "cuda_version": cuda,
            "devices": [asdict(d) for d in used],
            "parents": [asdict(d) for _, d in gpus if d.uuid in used_parents and d not in used],
            "health": health,
            "isolation": isolation or contract.ISOLATION_NONE,
            "confidential_computing": confidential,
        }
