"""Where a step's launcher and shim come from: the profile's `runtime.image`, or the step's image."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile


def injected(profile: TenantProfile) -> bool:
    """Whether the platform injects the launcher and the shim into the tenant's steps."""
    return profile.spec.runtime.image is not None


def launcher_prefix(profile: TenantProfile) -> tuple[str, ...]:
    """The argv in front of a step's command (behind KFP's launcher and its flags)."""
    return contract.RUNTIME_LAUNCHER_PREFIX if injected(profile) else contract.LAUNCHER_PREFIX


def shim_library(profile: TenantProfile) -> str:
    """The library `/etc/ld.so.preload` names on the tenant's time-sliced shim steps."""
    return contract.RUNTIME_SHIM if injected(profile) else contract.SHIM_LIBRARY_PATH


def warnings(profile: TenantProfile) -> list[str]:
    """What is weaker about the profile's runtime, as one line each (empty when nothing is)."""
    if injected(profile):
        return []
    return [
        "spec.runtime.image is not set, so steps run the launcher and shim of their own image, "
        "which the tenant builds; set it to the platform runtime image (REGISTRY/REPO@sha256:...)"
    ]
