"""The pod as the API server's validating admission judges it: defaults, then mutations, offline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from secureml.core.jsontree import copy_json
from secureml.pods.podspec import CONTAINER_LISTS, CREATED_CONTAINER_LISTS

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

DEFAULT_SCHEDULER = "default-scheduler"
VALIDATION_RULE_ID = "k8s.validation"  # the id `check-pod --server` gives the Pod API's refusals
# A volume's source fields (one of them set): those of core/v1 VolumeSource.
VOLUME_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)
_SOURCES = frozenset(VOLUME_SOURCES)


def api_defaults(pod: Mapping[str, Any], *, in_place: bool = False) -> dict[str, Any]:
    """`pod` with the Pod API defaults that change an admission verdict: a new dict, nothing shared
    with `pod` (as the API server decodes it), or with `in_place` the dict `pod` itself changed."""
    result = pod if in_place and isinstance(pod, dict) else copy_json(dict(pod))
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and _SOURCES.isdisjoint(volume):
            volume["emptyDir"] = {}
    if not spec.get("schedulerName"):
        spec["schedulerName"] = DEFAULT_SCHEDULER
    # `serviceAccount` is the deprecated alias: the API keeps one name, serviceAccountName's first.
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        spec["serviceAccountName"] = spec["serviceAccount"] = account
    if spec.get("hostNetwork") is True:  # (containers and init containers, not ephemeral)
        for list_name in CREATED_CONTAINER_LISTS:
            for container in spec.get(list_name) or []:
                for port in container.get("ports") or []:
                    if not port.get("hostPort") and "containerPort" in port:
                        port["hostPort"] = port["containerPort"]
    return result


def as_created(
    pod: Mapping[str, Any],
    profile: TenantProfile | None,
    *,
    mutated: bool = False,
    in_place: bool = False,
) -> dict[str, Any]:
    """The pod a CREATE hands to validating admission: defaults, then the tenant's mutations
    (unless `mutated`, or no profile). A new dict, or with `in_place` the dict `pod` itself
    changed: for a caller that owns `pod` (check-pod's pods, just read), which saves two copies."""
    defaulted = api_defaults(pod, in_place=in_place)
    if profile is None or mutated:
        return defaulted
    from secureml.pods.mutation.apply import apply_mutations

    return apply_mutations(defaulted, profile, in_place=True)


def invalid_after_mutation(pod: Mapping[str, Any]) -> str | None:
    """Why the Pod API would refuse `pod` (a repeated volume or container name, a repeated mount
    path in a container), or None."""
    spec = pod.get("spec") or {}
    volumes = [v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)]
    repeated = _first_repeat(volumes)
    if repeated is not None:
        return f'spec.volumes: the volume name "{repeated}" is used twice'
    names = [
        c.get("name")
        for list_name in CONTAINER_LISTS
        for c in spec.get(list_name) or []
        if isinstance(c, dict)
    ]
    repeated = _first_repeat(names)
    if repeated is not None:
        return f'the container name "{repeated}" is used twice'
    for list_name in CONTAINER_LISTS:
        for container in spec.get(list_name) or []:
            paths = [m.get("mountPath") for m in container.get("volumeMounts") or []]
            repeated = _first_repeat(paths)
            if repeated is not None:
                return f'container "{container.get("name")}" mounts two volumes at "{repeated}"'
    return None


def _first_repeat(values: list[Any]) -> Any:
    if len(set(values)) == len(values):  # (the common case, at C speed)
        return None
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None
