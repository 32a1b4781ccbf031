"""PrometheusRule over dcgm-exporter metrics for the tenant's GPUs.

dcgm-exporter labels each GPU metric with the pod using the GPU (`namespace`, `pod`, `container`)
when its Kubernetes mapping is on; the Prometheus scrape must keep those labels (honorLabels), or
`namespace` names the exporter's own namespace and these alerts never match.
"""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata
from secureml.profile import TenantProfile

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


def alert_rules(profile: TenantProfile) -> list[Manifest]:
    selector = f'{{namespace="{profile.spec.namespace}"}}'
    tenant = profile.metadata.name
    rules = [
        _rule(
            "SecuremlGpuXidError",
            f"max by ({GROUP_BY}) (DCGM_FI_DEV_XID_ERRORS{selector}) > 0",
            "0m",
            "critical",
            f"XID error on a GPU used by tenant {tenant}",
            "XID {{ $value }} on GPU {{ $labels.UUID }} ({{ $labels.Hostname }}), pod "
            "{{ $labels.pod }}: the driver reported a fault; scrub and check the GPU before reuse.",
        ),
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
