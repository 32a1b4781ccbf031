"""Kubeflow Profile (or a plain ResourceQuota): the tenant's GPU budget."""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata, tenant_labels
from secureml.profile.model import TenantProfile

QUOTA_NAME = "secureml-gpu-quota"
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
