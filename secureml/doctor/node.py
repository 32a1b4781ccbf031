"""`secureml doctor node`: is this GPU node fit for the tenants whose pools hold it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secureml.core.errors import InputError
from secureml.doctor.check import Check, Report
from secureml.doctor.node_host import (
    TOOLKIT_CONFIG,
    device_plugin_checks,
    device_plugin_missing,
    kernel_module_check,
    load_device_plugin_config,
    module_version,
    toolkit_check,
)
from secureml.doctor.node_pools import Expectations, expectations
from secureml.profile.model import TenantProfile

SCHEMA = "secureml.dev/doctor-node/v1"


@dataclass(frozen=True)
class NodeInputs:
    """What one run checks against: where the host's files are, the profiles, the node's labels
    (None: unknown, every profile applies) and the device plugin's configuration file. `toolkit`
    False skips the container toolkit's file (a step's container cannot see the host's)."""

    root: Path = Path("/")
    profiles: tuple[TenantProfile, ...] = ()
    labels: Mapping[str, str] | None = None
    device_plugin_config: Path | None = None
    toolkit_config: Path | None = None
    toolkit: bool = True


def parse_labels(items: Sequence[str]) -> dict[str, str]:
    """`--node-labels k=v[,k=v...]` (repeatable) as a dict; `InputError` on a malformed pair."""
    labels: dict[str, str] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise InputError(
                    f"--node-labels: {pair!r} is not KEY=VALUE",
                    fix="give the node's labels as KEY=VALUE pairs, comma-separated or repeated",
                )
            labels[key] = value
    return labels


def node_labels_from_api(
    node_name: str, kubeconfig: Path | None, context: str | None
) -> dict[str, str]:
    """The labels of Node `node_name`, read from the API server (needs `get` on nodes)."""
    from secureml.cluster import connect
    from secureml.cluster.connection import ServerRefusedError

    cluster = connect(kubeconfig, context)
    try:
        node = cluster.get(f"/api/v1/nodes/{node_name}")
    except ServerRefusedError as refusal:
        raise cluster.unusable(f"GET node {node_name}", refusal) from None
    return dict((node.get("metadata") or {}).get("labels") or {})


def _profiles_check(
    profiles: Sequence[TenantProfile], expected: Expectations, labels: Mapping[str, str] | None
) -> Check:
    name, title = "profiles.pool", "tenant profiles whose pools hold this node"
    how = "by the node's labels" if labels is not None else "(node labels unknown: all profiles)"
    if not profiles:
        return Check(
            name,
            title,
            "warn",
            "no --profiles given: the MIG, CC and time-slicing "
            "checks cannot say what the tenants expect",
            "give the tenant profiles: --profiles FILE|DIR (repeatable)",
        )
    if not expected.tenants:
        return Check(
            name,
            title,
            "warn",
            f"none of {', '.join(p.metadata.name for p in profiles)} selects this node {how}",
            "check the node's labels against the profiles' pool node selectors and models",
        )
    return Check(name, title, "pass", f"{', '.join(expected.tenants)} {how}")


def _nvml_checks(inputs: NodeInputs, expected: Expectations) -> list[Check]:
    """NVML reachable, then every NVML check; one fail and nothing else where NVML cannot start."""
    from secureml.doctor.node_gpu import gpu_checks

    name, title = "nvml.reachable", "NVML reachable"
    try:
        import pynvml
    except ImportError:
        return [
            Check(
                name,
                title,
                "fail",
                "nvidia-ml-py (pynvml) is not installed",
                "install secureml with its runtime dependencies",
            )
        ]
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return [
            Check(
                name,
                title,
                "fail",
                f"nvmlInit failed: {err}",
                "check the driver is installed and, in a pod, that the NVIDIA runtime "
                "mounted it (docs/bundle.md: the doctor DaemonSet's volumes)",
            )
        ]
    try:
        version = pynvml.nvmlSystemGetNVMLVersion()
        version = version.decode() if isinstance(version, bytes) else version
        labels = dict(inputs.labels) if inputs.labels is not None else None
        reached = Check(name, title, "pass", f"NVML {version}")
        try:
            return [reached, *gpu_checks(pynvml, expected, labels, module_version(inputs.root))]
        except (
            pynvml.NVMLError
        ) as err:  # a GPU lost or a driver fault mid-way: say so, no traceback
            return [
                reached,
                Check(
                    "nvml.error",
                    "NVML answered every query",
                    "fail",
                    f"NVML failed while checking the GPUs: {err}",
                    "check `dmesg` for NVRM errors (secureml doctor logs) and reset or drain the node",
                ),
            ]
    finally:
        pynvml.nvmlShutdown()


def node_report(inputs: NodeInputs) -> Report:
    """Every check of one run, in a fixed order."""
    expected = expectations(inputs.profiles, inputs.labels)
    report = Report(subject=str(inputs.root))
    report.add(_profiles_check(inputs.profiles, expected, inputs.labels))
    report.add(kernel_module_check(inputs.root))
    report.add(_nvml_checks(inputs, expected))
    if inputs.toolkit:
        report.add(toolkit_check(inputs.toolkit_config or inputs.root / TOOLKIT_CONFIG))
    if inputs.device_plugin_config is not None:
        config, where = load_device_plugin_config(inputs.device_plugin_config, inputs.labels)
        report.add(device_plugin_checks(config, where, expected))
    elif expected.time_slice:
        report.add(device_plugin_missing(expected))
    return report


def to_json(report: Report, inputs: NodeInputs) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "root": str(inputs.root),
        "profiles": [p.metadata.name for p in inputs.profiles],
        "nodeLabels": dict(inputs.labels) if inputs.labels is not None else None,
        **report.to_json(),
    }
