"""PrometheusRule over dcgm-exporter metrics for the tenant's GPUs."""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata
from secureml.nvidia.xid import ACTION_TEXT, ROWS, Action, XidClass
from secureml.profile.model import TenantProfile

MIB = 1024 * 1024
GROUP_BY = "namespace, pod, container, gpu, UUID, Hostname"


def _rule(
    alert: str, expr: str, duration: str, severity: str, summary: str, description: str
) -> Manifest:
    return {
        "alert": alert,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description},
    }


# alert name, severity, what it means and the action, per class of the Xid table
XID_ALERTS: dict[XidClass, tuple[str, str, str, Action]] = {
    "memory": (
        "SecuremlGpuXidMemory",
        "critical",
        "a memory/ECC fault: the GPU's memory can no longer be trusted (the launcher stopped the "
        "step, exit 79)",
        "drain-reset",
    ),
    "device": (
        "SecuremlGpuXidDevice",
        "critical",
        "the GPU, its firmware or its PCIe link stopped answering (the launcher stopped the step, "
        "exit 79)",
        "drain-reset",
    ),
    "nvlink": (
        "SecuremlGpuXidNvlink",
        "critical",
        "an NVLink error between GPUs",
        "drain-reset",
    ),
    "application": (
        "SecuremlGpuXidApplication",
        "warning",
        "the step's own fault (a bad address or an exception in a kernel)",
        "restart-step",
    ),
}


def _xids_of(xid_class: XidClass) -> list[int]:
    return sorted(row.xid for row in ROWS if row.xid_class == xid_class)


def _xid_rules(selector: str, tenant: str) -> list[Manifest]:
    """One alert per Xid class (the metric's value is the Xid), one for the codes outside them."""
    metric = f"DCGM_FI_DEV_XID_ERRORS{selector}"
    rules = []
    for xid_class, (alert, severity, meaning, action) in XID_ALERTS.items():
        matches = " or ".join(f"{metric} == {xid}" for xid in _xids_of(xid_class))
        rules.append(
            _rule(
                alert,
                f"max by ({GROUP_BY}) ({matches})",
                "0m",
                severity,
                f"{xid_class} Xid on a GPU used by tenant {tenant}",
                "Xid {{ $value }} on GPU {{ $labels.UUID }} ({{ $labels.Hostname }}), pod "
                f"{{{{ $labels.pod }}}}: {meaning}. Action: {ACTION_TEXT[action]}. "
                "`secureml doctor logs` on the node's kernel log names the step (docs/xid.md).",
            )
        )
    known = " or ".join(
        f"{metric} == {xid}" for xid_class in XID_ALERTS for xid in _xids_of(xid_class)
    )
    rules.append(
        _rule(
            "SecuremlGpuXidError",
            f"max by ({GROUP_BY}) ({metric} > 0 unless ({known}))",
            "0m",
            "critical",
            f"XID error on a GPU used by tenant {tenant}",
            "XID {{ $value }} on GPU {{ $labels.UUID }} ({{ $labels.Hostname }}), pod "
            "{{ $labels.pod }}: the driver reported a fault outside secureml's Xid table; look it "
            "up in NVIDIA's Xid catalogue, scrub and check the GPU before reuse.",
        )
    )
    return rules


def alert_rules(profile: TenantProfile) -> list[Manifest]:
    selector = f'{{namespace="{profile.spec.namespace}"}}'
    tenant = profile.metadata.name
    rules = [
        *_xid_rules(selector, tenant),
        _rule(
            "SecuremlGpuPcieReplayErrors",
            f"sum by ({GROUP_BY}) (increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{selector}[1m])) > 100",
            "0m",
            "warning",
            f"PCIe replay errors on a GPU used by tenant {tenant}",
            "{{ $value }} PCIe replays in the last minute on GPU {{ $labels.UUID }} "
            "({{ $labels.Hostname }}): the link is degrading.",
        ),
        _rule(
            "SecuremlGpuMemoryCopyUtilisationHigh",
            f"avg by ({GROUP_BY}) (DCGM_FI_DEV_MEM_COPY_UTIL{selector}) > 90",
            "5m",
            "warning",
            f"GPU memory bandwidth saturated for tenant {tenant}",
            "Memory copy utilisation {{ $value }}% for 5 minutes on GPU {{ $labels.UUID }}, pod "
            "{{ $labels.pod }}: on a shared GPU this starves the other tenants.",
        ),
    ]
    time_slice = profile.spec.gpu.time_slice
    if time_slice is not None:
        limit_mib = time_slice.max_memory // MIB
        rules.append(
            _rule(
                "SecuremlGpuFramebufferOverTenantLimit",
                f"max by ({GROUP_BY}) (DCGM_FI_DEV_FB_USED{selector}) > {limit_mib}",
                "1m",
                "critical",
                f"GPU memory above tenant {tenant}'s time-slice limit",
                f"{{{{ $value }}}} MiB in use on time-sliced GPU {{{{ $labels.UUID }}}}, pod "
                f"{{{{ $labels.pod }}}}; the tenant's limit is {limit_mib} MiB. The figure is the whole "
                "device's, so other tenants on the same GPU count towards it.",
            )
        )
    return rules


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if not profile.spec.monitoring.alerts:
        return []
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata(profile, "secureml-gpu-alerts"),
            "spec": {
                "groups": [
                    {"name": f"secureml-{profile.metadata.name}-gpu", "rules": alert_rules(profile)}
                ]
            },
        }
    ]
