"""Warnings on a profile's GPU quota: what a namespace could take that the profile leaves open."""

from __future__ import annotations

from secureml.profile.model import TenantProfile


def quota_warnings(profile: TenantProfile) -> list[str]:
    """One line per GPU resource the profile grants without a quota entry: the device plugin's
    time-sliced shares (on `dra` a share is a claim, which the bundle's quota counts itself)."""
    gpu = profile.spec.gpu
    time_slice = gpu.time_slice
    if (
        gpu.backend != "device-plugin"
        or time_slice is None
        or time_slice.resource_name in gpu.quota
    ):
        return []
    resource = time_slice.resource_name
    return [
        f"spec.gpu.quota has no entry for the time-sliced resource {resource}: the namespace may "
        f"hold every time-sliced share the pool offers at once; add `{resource}: N` under "
        "spec.gpu.quota with the shares this tenant may hold"
    ]
