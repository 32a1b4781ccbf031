"""Where a step's launcher and shim come from (issue 10, class 9).

With the profile's `runtime.image` (the platform's runtime image, digest-pinned), the mutating
policy injects both from that image (contract.RUNTIME_*): the compiler puts
contract.RUNTIME_LAUNCHER in front of the step's command, `/etc/ld.so.preload` names
contract.RUNTIME_SHIM, and the ValidatingAdmissionPolicy requires the injected shape. Without it the
launcher is the `secureml` package of the step's own image (`python3 -m secureml.enforcement.launch`)
and the shim is the file at contract.SHIM_LIBRARY_PATH inside that image: an image the tenant builds
can replace both. Tiers confidential and restricted refuse a profile without `runtime.image`
(profile validation); for the others `warnings` says what is weaker, and the commands that read a
profile print it.
"""

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
