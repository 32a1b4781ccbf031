"""Node checks that read files: the kernel module, the container toolkit's and the device plugin's
configuration. Every path is under `root` (the host's `/`, or where a pod mounts it), so tests
and the DaemonSet point the checks at another tree.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from secureml.core.errors import InputError
from secureml.doctor.check import Check, Status
from secureml.doctor.node_pools import Expectations

MODULE_VERSION_FILE = "proc/driver/nvidia/version"
MODULE_DIR = "sys/module/nvidia"
TOOLKIT_CONFIG = "etc/nvidia-container-runtime/config.toml"
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # the GPU operator's per-node choice
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..." (proprietary) or
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ..." (open).
_NVRM = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def module_version(root: Path) -> str | None:
    """The loaded kernel module's version from /proc/driver/nvidia/version, or None."""
    try:
        text = (root / MODULE_VERSION_FILE).read_text(errors="replace")
    except OSError:
        return None
    match = _NVRM.search(text)
    return match.group(1) if match else None


def kernel_module_check(root: Path) -> Check:
    name, title = "kernel.module", "NVIDIA kernel module loaded"
    version = module_version(root)
    loaded = (root / MODULE_DIR).is_dir()
    if version and loaded:
        return Check(name, title, "pass", f"nvidia {version} ({root / MODULE_VERSION_FILE})")
    if version or loaded:
        seen = (
            f"{root / MODULE_DIR} exists but {root / MODULE_VERSION_FILE} gives no version"
            if loaded
            else f"{root / MODULE_VERSION_FILE} says {version} but {root / MODULE_DIR} is absent"
        )
        return Check(
            name, title, "warn", seen, "check `lsmod | grep nvidia` and `dmesg | grep NVRM`"
        )
    return Check(
        name,
        title,
        "fail",
        f"neither {root / MODULE_VERSION_FILE} nor {root / MODULE_DIR} exists",
        "install the NVIDIA driver (or let the GPU operator's driver DaemonSet) and load the "
        "module: `modprobe nvidia`; on a pod, mount the host's /proc/driver/nvidia and "
        "/sys/module/nvidia (see docs/bundle.md)",
    )


def toolkit_check(path: Path) -> Check:
    """`accept-nvidia-visible-devices-envvar-when-unprivileged` must be false: otherwise any pod
    that sets NVIDIA_VISIBLE_DEVICES=all gets every GPU of the node without asking the device
    plugin (the toolkit's default is true)."""
    name, title = (
        "toolkit.envvar",
        "container toolkit ignores NVIDIA_VISIBLE_DEVICES of unprivileged pods",
    )
    fix = (
        f"set `{ENVVAR_KEY} = false` (and `{VOLUME_MOUNTS_KEY} = true`, with the device plugin's "
        f"deviceListStrategy volume-mounts) at the top of {path}, then restart the runtime"
    )
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Check(name, title, "fail", f"{path} not found: the toolkit's default is true", fix)
    except OSError as err:
        return Check(name, title, "fail", f"cannot read {path}: {err.strerror or err}", fix)
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        return Check(name, title, "fail", f"{path} is not valid TOML: {err}", fix)
    value = config.get(ENVVAR_KEY)
    mounts = config.get(VOLUME_MOUNTS_KEY)
    also = f"; {VOLUME_MOUNTS_KEY} = {str(mounts).lower()}" if mounts is not None else ""
    if value is False:
        return Check(name, title, "pass", f"{ENVVAR_KEY} = false in {path}{also}")
    seen = f"{ENVVAR_KEY} = {str(value).lower()}" if value is not None else f"{ENVVAR_KEY} not set"
    return Check(name, title, "fail", f"{seen} in {path} (default true){also}", fix)


# --- the device plugin's configuration --------------------------------------------------------


def load_device_plugin_config(
    path: Path, labels: Mapping[str, str] | None
) -> tuple[dict[str, Any], str]:
    """The device plugin's config (k8s-device-plugin `version: v1`), from a config file or from
    the GPU operator's ConfigMap (the entry the node label `nvidia.com/device-plugin.config`
    names, else its only entry). Returns the config and where it came from; `InputError` if the
    file cannot be used."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text())
    except OSError as err:
        raise InputError(f"cannot read {path}", why=err.strerror or str(err)) from None
    except yaml.YAMLError as err:
        raise InputError(f"{path} is not YAML", why=str(err)) from None
    where = str(path)
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        data = document.get("data") or {}
        chosen = (labels or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
        if chosen is None and len(data) == 1:
            chosen = next(iter(data))
        if chosen not in data:
            raise InputError(
                f"{path}: cannot tell which entry of the ConfigMap applies to this node",
                why=f"entries: {', '.join(sorted(data)) or 'none'}; node label "
                f"{DEVICE_PLUGIN_CONFIG_LABEL}={chosen or '(unset)'}",
                fix=f"give --node-labels {DEVICE_PLUGIN_CONFIG_LABEL}=ENTRY, or the entry's own file",
            )
        try:
            document = yaml.safe_load(data[chosen])
        except yaml.YAMLError as err:
            raise InputError(f"{path}: entry {chosen} is not YAML", why=str(err)) from None
        where = f"{path} (entry {chosen})"
    if not isinstance(document, dict) or document.get("version") != "v1":
        raise InputError(
            f"{where} is not a device plugin configuration",
            why="expected a mapping with version: v1 (k8s-device-plugin's config file format)",
        )
    return document, where


def _advertised(timeslicing: Mapping[str, Any]) -> dict[str, int]:
    """Resource name -> replicas the device plugin advertises under time-slicing."""
    rename_default = bool(timeslicing.get("renameByDefault", False))
    found: dict[str, int] = {}
    for entry in timeslicing.get("resources") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        name = str(
            entry.get("rename") or (f"{entry['name']}.shared" if rename_default else entry["name"])
        )
        found[name] = int(entry.get("replicas") or 0)
    return found


def device_plugin_checks(
    config: Mapping[str, Any], where: str, expected: Expectations
) -> list[Check]:
    """The MIG strategy and the time-slicing resources against what the profiles expect."""
    checks: list[Check] = []
    flags = config.get("flags") or {}
    strategy = str(flags.get("migStrategy", "none"))
    if expected.mig_strategy:
        wanted = sorted(expected.mig_strategy)
        ok = strategy in wanted and len(wanted) == 1
        checks.append(
            Check(
                "device_plugin.mig_strategy",
                "device plugin MIG strategy matches the profiles",
                "pass" if ok else "fail",
                f"migStrategy {strategy} in {where}; profiles: "
                + "; ".join(
                    f"{s} ({', '.join(t)})" for s, t in sorted(expected.mig_strategy.items())
                ),
                ""
                if ok
                else "set flags.migStrategy to the profiles' gpu.migStrategy (one per node pool)",
            )
        )
    sharing = (config.get("sharing") or {}).get("timeSlicing") or {}
    advertised = _advertised(sharing)
    for resource, tenants in sorted(expected.time_slice.items()):
        title = f"device plugin advertises {resource} (time-slicing)"
        name = f"device_plugin.timeslice[{resource}]"
        who = ", ".join(tenants)
        if resource not in advertised:
            listed = ", ".join(f"{n} x{r}" for n, r in sorted(advertised.items())) or "none"
            rename = " with renameByDefault: true" if resource.endswith(".shared") else ""
            checks.append(
                Check(
                    name,
                    title,
                    "fail",
                    f"{where} time-slices {listed}; {who} request {resource}",
                    f"add sharing.timeSlicing.resources for {resource.removesuffix('.shared')}"
                    f"{rename}, or set the profiles' gpu.timeSlice.resourceName to what is advertised",
                )
            )
            continue
        replicas = advertised[resource]
        seen = f"{resource} x{replicas} replicas per GPU in {where} (for {who})"
        fixes = []
        if replicas < 2:
            fixes.append("set replicas to 2 or more: one replica is not a shared GPU")
        if not sharing.get("failRequestsGreaterThanOne", False):
            seen += "; failRequestsGreaterThanOne is false"
            fixes.append(
                "set sharing.timeSlicing.failRequestsGreaterThanOne: true, so that a pod asking "
                "for two replicas fails rather than being promised twice the share"
            )
        status: Status = "warn" if fixes else "pass"
        checks.append(Check(name, title, status, seen, "; ".join(fixes)))
    return checks


def device_plugin_missing(expected: Expectations) -> Check:
    return Check(
        "device_plugin.config",
        "device plugin configuration checked",
        "warn",
        "no --device-plugin-config given; time-sliced profiles on this node: "
        + ", ".join(sorted(expected.time_slice)),
        "pass the device plugin's config file or the GPU operator's ConfigMap YAML "
        "(kubectl get configmap -o yaml): --device-plugin-config FILE",
    )
