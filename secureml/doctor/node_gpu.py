"""Node checks through NVML: driver, CUDA, persistence, MIG layout, CC, ECC, remapped and retired
pages. NVML's "not supported" is reported as such, not as a failure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from secureml.doctor.check import Check
from secureml.doctor.node_pools import Expectations
from secureml.enforcement.confidential import read_cc_state
from secureml.enforcement.preflight import mig_handles, physical_handles


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def driver_check(nvml: Any, module: str | None) -> Check:
    """Driver version (against the loaded kernel module's) and the newest CUDA it runs."""
    name, title = "driver.version", "driver version and the CUDA versions it supports"
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = _cuda(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    seen = f"driver {driver}; CUDA {cuda} and older (forward compatibility aside)"
    if module and module != driver:
        return Check(
            name,
            title,
            "fail",
            f"{seen}; the kernel module is {module}: Driver/library version mismatch",
            "reboot the node, or unload and reload the nvidia modules, so that the module and "
            "the user-space driver are the same release",
        )
    return Check(name, title, "pass", seen)


def _unsupported(nvml: Any) -> tuple[type[Exception], ...]:
    return (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission)


def _label(index: int, nvml: Any, handle: Any) -> str:
    return f"GPU {index} ({_text(nvml.nvmlDeviceGetName(handle))}, {_text(nvml.nvmlDeviceGetUUID(handle))})"


def persistence_check(nvml: Any, index: int, handle: Any) -> Check:
    name, title = f"gpu[{index}].persistence", "persistence mode on"
    where = _label(index, nvml, handle)
    try:
        on = nvml.nvmlDeviceGetPersistenceMode(handle) == nvml.NVML_FEATURE_ENABLED
    except _unsupported(nvml):
        return Check(name, title, "pass", f"{where}: not supported (persistenced manages it)")
    if on:
        return Check(name, title, "pass", f"{where}: enabled")
    return Check(
        name,
        title,
        "warn",
        f"{where}: disabled: the driver tears the GPU down between pods, so each step pays the "
        "initialisation and the preflight may meet a GPU that is still coming up",
        "run nvidia-persistenced (the GPU operator's driver does), or `nvidia-smi -pm 1`",
    )


def ecc_check(nvml: Any, index: int, handle: Any) -> Check:
    name, title = f"gpu[{index}].ecc", "ECC on, no uncorrectable errors"
    where = _label(index, nvml, handle)
    try:
        current, pending = nvml.nvmlDeviceGetEccMode(handle)
    except _unsupported(nvml):
        return Check(name, title, "pass", f"{where}: ECC not supported on this GPU")
    if current != nvml.NVML_FEATURE_ENABLED:
        soon = " (enabled at the next reset)" if pending == nvml.NVML_FEATURE_ENABLED else ""
        return Check(
            name,
            title,
            "warn",
            f"{where}: ECC disabled{soon}: memory errors go undetected",
            "enable ECC (`nvidia-smi -e 1`) and reset the GPU",
        )
    volatile = nvml.NVML_VOLATILE_ECC
    uncorrected = int(
        nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile)
    )
    corrected = int(
        nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile)
    )
    seen = (
        f"{where}: ECC on; since the driver loaded {corrected} corrected, {uncorrected} uncorrected"
    )
    if uncorrected:
        return Check(
            name,
            title,
            "fail",
            seen,
            "drain the node and reset the GPU (pages or rows are retired at reset); replace it "
            "if errors return",
        )
    return Check(name, title, "pass", seen)


def row_remap_check(nvml: Any, index: int, handle: Any) -> Check:
    name, title = f"gpu[{index}].row_remapping", "row remapping healthy"
    where = _label(index, nvml, handle)
    try:
        corr, unc, pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
    except _unsupported(nvml):
        return Check(
            name, title, "pass", f"{where}: not supported (GPUs before Ampere retire pages)"
        )
    seen = f"{where}: {corr} rows remapped for correctable, {unc} for uncorrectable errors"
    if failed:
        return Check(name, title, "fail", f"{seen}; a remapping failed", "replace the GPU")
    if pending:
        return Check(
            name,
            title,
            "fail",
            f"{seen}; a remapping is pending",
            "drain the node and reset the GPU",
        )
    return Check(name, title, "pass", seen)


def retired_pages_check(nvml: Any, index: int, handle: Any) -> Check:
    name, title = f"gpu[{index}].retired_pages", "no retired pages pending"
    where = _label(index, nvml, handle)
    try:
        pending = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED
        dbe = len(
            nvml.nvmlDeviceGetRetiredPages(
                handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
            )
        )
        sbe = len(
            nvml.nvmlDeviceGetRetiredPages(
                handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            )
        )
    except _unsupported(nvml):
        return Check(name, title, "pass", f"{where}: not supported (Ampere and later remap rows)")
    seen = f"{where}: {dbe} pages retired for double-bit, {sbe} for single-bit errors"
    if pending:
        return Check(
            name,
            title,
            "fail",
            f"{seen}; retirement pending: the bad pages stay in use until a reset",
            "drain the node and reset the GPU (nvidia-smi -r)",
        )
    return Check(name, title, "pass", seen)


def _mig_profile(nvml: Any, handle: Any) -> str:
    """The MIG profile from an instance's name (`... MIG 1g.10gb`), as the preflight reads it."""
    name = _text(nvml.nvmlDeviceGetName(handle))
    return name.rsplit(" MIG ", 1)[1].strip() if " MIG " in name else "unknown"


def mig_checks(nvml: Any, gpus: list[tuple[int, Any]], expected: Expectations) -> list[Check]:
    """MIG mode and instances of each GPU against the profiles whose pools hold this node."""
    checks: list[Check] = []
    present: Counter[str] = Counter()
    any_on = False
    for index, handle in gpus:
        where = _label(index, nvml, handle)
        name, title = f"gpu[{index}].mig", "MIG mode and instances"
        try:
            current, pending = nvml.nvmlDeviceGetMigMode(handle)
        except _unsupported(nvml):
            current = pending = None
        if current is None:
            checks.append(
                Check(
                    name,
                    title,
                    "pass" if not expected.mig_profiles else "fail",
                    f"{where}: MIG not supported",
                    ""
                    if not expected.mig_profiles
                    else "MIG profiles are expected here ("
                    + ", ".join(sorted(expected.mig_profiles))
                    + "): move the node out of the MIG pool or use a MIG-capable GPU",
                )
            )
            continue
        on = current == nvml.NVML_DEVICE_MIG_ENABLE
        instances = (
            Counter(_mig_profile(nvml, h) for h in mig_handles(nvml, handle)) if on else Counter()
        )
        present.update(instances)
        any_on = any_on or on
        layout = ", ".join(f"{n}x {p}" for p, n in sorted(instances.items())) or "no instances"
        seen = f"{where}: MIG {'on' if on else 'off'}" + (f", {layout}" if on else "")
        if pending != current:
            checks.append(
                Check(
                    name,
                    title,
                    "warn",
                    f"{seen}; MIG mode {'on' if pending else 'off'} is pending a reset",
                    "drain the node and reset the GPU to apply the pending MIG mode",
                )
            )
        elif on and expected.whole_gpu and not expected.mig_profiles:
            checks.append(
                Check(
                    name,
                    title,
                    "fail",
                    f"{seen}; whole GPUs expected by {', '.join(expected.whole_gpu)}",
                    "disable MIG on the dedicated pool's GPUs (nvidia-smi -mig 0)",
                )
            )
        elif on and not instances:
            checks.append(
                Check(
                    name,
                    title,
                    "fail",
                    f"{seen}: MIG is on but no GPU can be used",
                    "create the instances (nvidia-smi mig -cgi ... -C, or the GPU "
                    "operator's MIG manager with nvidia.com/mig.config)",
                )
            )
        else:
            checks.append(Check(name, title, "pass", seen))
    if expected.mig_profiles:
        checks.append(_mig_profiles_check(present, expected, any_on))
    return checks


def _mig_profiles_check(present: Counter[str], expected: Expectations, any_on: bool) -> Check:
    """Under the `mixed` strategy a node of the right product need not be a MIG node: with no GPU
    in MIG mode it simply offers no instances. Under `single` its product label says MIG."""
    name, title = "mig.profiles", "MIG instances the profiles allow are present"
    wanted = expected.mig_profiles
    if not any_on:
        single = expected.mig_strategy.get("single", [])
        if single:
            return Check(
                name,
                title,
                "fail",
                f"no GPU in MIG mode, but the node's product label is a MIG one (strategy single: "
                f"{', '.join(single)})",
                "enable MIG and create the instances (the MIG manager's nvidia.com/mig.config)",
            )
        return Check(name, title, "pass", "no GPU in MIG mode: this node offers no MIG instances")
    missing = sorted(p for p in wanted if not present[p])
    unused = sorted(p for p in present if p not in wanted)
    layout = ", ".join(f"{n}x {p}" for p, n in sorted(present.items())) or "none"
    seen = f"instances on this node: {layout}; allowed by the profiles: " + "; ".join(
        f"{p} ({', '.join(t)})" for p, t in sorted(wanted.items())
    )
    if not any(present[p] for p in wanted):
        return Check(
            name,
            title,
            "fail",
            seen,
            "create instances of an allowed profile, or take the node out of the pool",
        )
    if missing or unused:
        parts = []
        if missing:
            parts.append(f"no instance of {', '.join(missing)}")
        if unused:
            parts.append(f"{', '.join(unused)} allowed by no profile on this node (idle capacity)")
        return Check(
            name,
            title,
            "warn",
            f"{seen}; {'; '.join(parts)}",
            "align the node's MIG configuration (nvidia.com/mig.config) with the profiles",
        )
    return Check(name, title, "pass", seen)


def confidential_check(nvml: Any, expected: Expectations, labels: dict[str, str] | None) -> Check:
    """The system's CC state; a fail where a profile on this node requires CC and it is not in
    force, or where the node's CC label claims a state NVML does not confirm."""
    from secureml.nvidia.catalogue import CC_READY, LABEL_CC_READY

    name, title = "cc.state", "confidential computing state"
    state = read_cc_state(nvml)
    seen = state.error or (
        f"CC mode {state.mode}, GPUs {'ready' if state.ready else 'not ready'}, GPUs "
        f"{'' if state.gpus_capable else 'not '}CC-capable, CPU TEE {state.cpu}, "
        f"environment {state.environment}, multi-GPU {state.multi_gpu}"
    )
    label = (labels or {}).get(LABEL_CC_READY)
    if expected.confidential and not state.confidential:
        return Check(
            name,
            title,
            "fail",
            f"{seen}; required by {', '.join(expected.confidential)}",
            "put the GPUs in CC mode (GPU operator: node label nvidia.com/cc.mode=on) "
            "on a confidential VM (SEV-SNP / TDX), or take the node out of the pool",
        )
    if label == CC_READY and not state.confidential:
        return Check(
            name,
            title,
            "fail",
            f"{seen}; yet the node is labelled {LABEL_CC_READY}={label}",
            "the label is stale or set by hand: let the CC manager set it, or remove it",
        )
    if state.mode == "devtools":
        return Check(
            name,
            title,
            "warn",
            f"{seen}: devtools mode is for debugging and is not confidential",
            "set the CC mode to on (nvidia.com/cc.mode=on)",
        )
    return Check(name, title, "pass", seen)


def gpu_checks(
    nvml: Any, expected: Expectations, labels: dict[str, str] | None, module: str | None
) -> list[Check]:
    """Every NVML check, in a fixed order: system first, then per GPU, then MIG against profiles."""
    checks = [driver_check(nvml, module)]
    gpus = physical_handles(nvml)
    if not gpus:
        checks.append(
            Check(
                "gpu.count",
                "GPUs visible to NVML",
                "fail",
                "NVML shows no GPU",
                "check that the pod sees the node's GPUs (docs/bundle.md) or that the node has any",
            )
        )
        return checks
    checks.append(
        Check(
            "gpu.count",
            "GPUs visible to NVML",
            "pass",
            ", ".join(_label(i, nvml, h) for i, h in gpus),
        )
    )
    checks.append(confidential_check(nvml, expected, labels))
    for index, handle in gpus:
        checks += [
            persistence_check(nvml, index, handle),
            ecc_check(nvml, index, handle),
            row_remap_check(nvml, index, handle),
            retired_pages_check(nvml, index, handle),
        ]
    checks += mig_checks(nvml, gpus, expected)
    return checks
