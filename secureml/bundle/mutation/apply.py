"""`apply_mutations`: the tenant's mutations applied in Python, the twin of the admission policy."""

from __future__ import annotations

from typing import Any

from secureml import contract
from secureml.bundle.common import Manifest
from secureml.bundle.mutation.catalogue import mutations_for_profile
from secureml.bundle.mutation.groups import Group, group_operations
from secureml.bundle.mutation.model import FromLabel
from secureml.jsontree import copy_json
from secureml.profile import TenantProfile


def _labels(pod: Manifest) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def is_tenant_step(pod: Manifest, profile: TenantProfile) -> bool:
    """The policy matches pods in the tenant's namespace (a pod without one is taken to be there)
    whose tenant label names this tenant."""
    namespace = (pod.get("metadata") or {}).get("namespace")
    if namespace not in (None, profile.spec.namespace):
        return False
    return _labels(pod).get(contract.LABEL_TENANT) == profile.metadata.name


def _resolved(value: Any, labels: dict[str, str]) -> Any:
    """`value` with each `FromLabel` read from `labels`: a new copy (`copy_json`'s), nothing
    shared with the profile's mutations or with another pod (one pass, not a resolve and a copy)."""
    if type(value) is str:  # most leaves (copy_json too gives a str itself back)
        return value
    if isinstance(value, FromLabel):
        return labels[value.key]
    if isinstance(value, dict):
        return {key: _resolved(item, labels) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolved(item, labels) for item in value]
    return copy_json(value)


def _group_value(group: Group, labels: dict[str, str]) -> tuple[bool, Any]:
    """Whether the group applies to a pod with `labels`, and the value or items it writes (the
    profile's own, unresolved: `_write` resolves a copy per place it writes to)."""
    live = [value for when, value in group.parts if when is None or when.holds(labels)]
    if not live:
        return False, None
    if group.kind == "set":
        return True, live[0]
    return True, [item for value in live for item in value]


def _groups(profile: TenantProfile) -> list[Group]:
    """The profile's mutations, grouped: built once per profile object (a frozen model), not
    once per pod. The cache holds the profile itself, so an id is never taken for another's."""
    cached = _GROUPS.get(id(profile))
    if cached is None or cached[0] is not profile:
        if len(_GROUPS) > 16:
            _GROUPS.clear()
        cached = _GROUPS[id(profile)] = (profile, group_operations(mutations_for_profile(profile)))
    return cached[1]


_GROUPS: dict[int, tuple[TenantProfile, list[Group]]] = {}


def _write(
    node: dict[str, Any], path: tuple[str, ...], kind: str, value: Any, labels: dict[str, str]
) -> None:
    *parents, leaf = path
    for name in parents:  # (a pod always has metadata and spec; setdefault keeps them)
        node = node.setdefault(name, {})
    if kind == "set":
        node[leaf] = _resolved(value, labels)
    elif kind == "prepend":
        node[leaf] = _resolved(value, labels) + list(node.get(leaf) or [])
    else:
        node[leaf] = list(node.get(leaf) or []) + _resolved(value, labels)


def apply_mutations(pod: Manifest, profile: TenantProfile, *, in_place: bool = False) -> Manifest:
    """The pod as the tenant's MutatingAdmissionPolicy would admit it: a new dict, or with
    `in_place` `pod` itself changed (for a caller that owns it: check-pod's freshly read pods).

    Pods that are not this tenant's secure steps (tenant label) come back unchanged.
    """
    result = pod if in_place else copy_json(pod)
    if not is_tenant_step(pod, profile):
        return result
    labels = _labels(pod)
    spec = result.setdefault("spec", {})
    # Container operations touch the containers as submitted, as the policy's CEL maps over
    # `object.spec`: not an init container another operation appends (the injected runtime's).
    submitted = {name: list(spec.get(name) or []) for name in ("containers", "initContainers")}
    for group in _groups(profile):
        applies, value = _group_value(group, labels)
        if not applies:
            continue
        if group.target == "pod":
            _write(result, group.path, group.kind, value, labels)
            continue
        for field_name, containers in submitted.items():
            for container in containers:
                if group.target == "main" and (
                    field_name != "containers"
                    or container.get("name") != contract.KFP_MAIN_CONTAINER
                ):
                    continue
                _write(container, group.path, group.kind, value, labels)
    return result
