"""Hand-written pods as a tenant submits them and as they reach the validating policy."""

from __future__ import annotations

from typing import Any

from secureml.core import contract
from secureml.core.jsontree import copy_json
from secureml.pods.admitted import as_created
from secureml.profile.model import TenantProfile
from secureml.profile.runtime_image import launcher_prefix


def admitted(pod: dict[str, Any], profile: TenantProfile) -> dict[str, Any]:
    """A hand-written pod as it reaches the validating policy on CREATE: the Pod API's defaults,
    then the tenant's mutating policy, which injects the platform's runtime where the profile names
    `runtime.image` (`as_created`: the path `check-pod` takes). A new dict."""
    return as_created(pod, profile)


def with_launcher_of(pod: dict[str, Any], profile: TenantProfile) -> dict[str, Any]:
    """A corpus pod (written with the launcher of the step's image) with `main`'s launcher as the
    compiler writes it for `profile` (`runtime_image.launcher_prefix`: the injected one where the
    profile names `runtime.image`). A new dict."""
    result = copy_json(pod)
    old, new = list(contract.LAUNCHER_PREFIX), list(launcher_prefix(profile))
    for container in result["spec"]["containers"]:
        if container.get("name") != contract.KFP_MAIN_CONTAINER:
            continue
        for key in ("command", "args"):
            argv = container.get(key) or []
            starts = [i for i in range(len(argv)) if argv[i : i + len(old)] == old]
            if starts:
                container[key] = argv[: starts[0]] + new + argv[starts[0] + len(old) :]
    return result
