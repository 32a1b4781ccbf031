"""Kubeflow Profile (or a plain ResourceQuota) and a LimitRange: the tenant's GPU budget.

Quotas on extended resources are written with the `requests.` prefix (extended resources cannot
be overcommitted, so requests and limits are the same number). The LimitRange caps what one
container may ask for, which a namespace quota cannot.
"""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata, tenant_labels
from secureml.gpu import RESOURCE_GPU
from secureml.profile import TenantProfile

QUOTA_NAME = "secureml-gpu-quota"
LIMIT_RANGE_NAME = "secureml-gpu-limits"
_DRA_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def quota_hard(profile: TenantProfile) -> dict[str, str]:
    """ResourceQuota `hard` entries for the profile's GPU quota, sorted by resource name."""
    hard: dict[str, str] = {}
    for resource, amount in sorted(profile.spec.gpu.quota.items()):
        # DRA device-class quotas are already whole quota keys; extended resources take `requests.`.
        key = resource if resource.endswith(_DRA_QUOTA_SUFFIX) else f"requests.{resource}"
        hard[key] = str(amount)
    return hard


def render_profile(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    """Kubeflow `Profile`: its name is the namespace the Kubeflow profile controller manages."""
    spec: Manifest = {"owner": {"kind": profile.spec.owner.kind, "name": profile.spec.owner.name}}
    hard = quota_hard(profile)
    if hard:
        spec["resourceQuotaSpec"] = {"hard": hard}
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Profile",
            "metadata": {"name": profile.spec.namespace, "labels": tenant_labels(profile)},
            "spec": spec,
        }
    ]


def render_resource_quota(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    hard = quota_hard(profile)
    if not hard:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": metadata(profile, QUOTA_NAME),
            "spec": {"hard": hard},
        }
    ]


def container_gpu_max(profile: TenantProfile) -> dict[str, str]:
    """Most of each GPU resource one container may hold (device-plugin backend)."""
    gpu = profile.spec.gpu
    if gpu.backend == "dra":
        return {}
    limits: dict[str, str] = {}
    if gpu.time_slice is not None:
        limits[gpu.time_slice.resource_name] = "1"
    # Under the `single` MIG strategy nvidia.com/gpu also counts MIG instances: no cap then.
    mig_single = gpu.mig is not None and gpu.mig_strategy == "single"
    if gpu.whole_gpu is not None and not mig_single:
        limits[RESOURCE_GPU] = str(gpu.whole_gpu.max_per_step)
    return dict(sorted(limits.items()))


def render_limit_range(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    limits = container_gpu_max(profile)
    if not limits:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": metadata(profile, LIMIT_RANGE_NAME),
            "spec": {"limits": [{"type": "Container", "max": limits}]},
        }
    ]
