"""`apply_mutations`: the tenant's mutations applied in Python, the twin of the admission policy."""

from __future__ import annotations

import marshal
from dataclasses import dataclass
from typing import Any

from secureml.core import contract
from secureml.core.jsontree import copy_json
from secureml.pods.mutation.catalogue import mutations_for_profile
from secureml.pods.mutation.groups import Group, group_operations
from secureml.pods.mutation.model import FromLabel, LabelIs
from secureml.profile.model import TenantProfile

Manifest = dict[str, Any]  # a Kubernetes object as JSON


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


@dataclass(frozen=True)
class _Part:
    """One part of a group (its condition and value) and, where the value is plain JSON (dicts
    with string keys, lists, strings, numbers, booleans, null: no `FromLabel`), the value marshalled
    once: `marshal.loads` of it is a new copy, as `copy_json` makes, built in C (about a third of
    the time). Version 2 writes no references, so no dict or list is shared within a copy."""

    when: LabelIs | None
    value: Any
    marshalled: bytes | None

    def copy(self, labels: dict[str, str]) -> Any:
        if self.marshalled is None:
            return _resolved(self.value, labels)
        return marshal.loads(self.marshalled)


def _part(when: LabelIs | None, value: Any) -> _Part:
    return _Part(when, value, marshal.dumps(value, 2) if _plain(value) else None)


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _plain(item) for key, item in value.items())
    if kind is list:
        return all(_plain(item) for item in value)
    return kind is str or kind is int or kind is float or kind is bool or value is None


def _live(parts: tuple[_Part, ...], labels: dict[str, str]) -> list[_Part]:
    """The group's parts that apply to a pod with `labels`."""
    return [part for part in parts if part.when is None or part.when.holds(labels)]


def _groups(profile: TenantProfile) -> list[tuple[Group, tuple[_Part, ...]]]:
    """The profile's mutations, grouped: built once per profile object (a frozen model), not
    once per pod. The cache holds the profile itself, so an id is never taken for another's."""
    cached = _GROUPS.get(id(profile))
    if cached is None or cached[0] is not profile:
        if len(_GROUPS) > 16:
            _GROUPS.clear()
        groups = group_operations(mutations_for_profile(profile))
        prepared = [
            (group, tuple(_part(when, value) for when, value in group.parts)) for group in groups
        ]
        cached = _GROUPS[id(profile)] = (profile, prepared)
    return cached[1]


_GROUPS: dict[int, tuple[TenantProfile, list[tuple[Group, tuple[_Part, ...]]]]] = {}


def _write(
    node: dict[str, Any],
    path: tuple[str, ...],
    kind: str,
    live: list[_Part],
    labels: dict[str, str],
) -> None:
    """The live parts' values written at `path` under `node`: each a new copy."""
    *parents, leaf = path
    for name in parents:  # (a pod always has metadata and spec; setdefault keeps them)
        node = node.setdefault(name, {})
    if kind == "set":
        node[leaf] = live[0].copy(labels)
        return
    items = [item for part in live for item in part.copy(labels)]
    if kind == "prepend":
        node[leaf] = items + list(node.get(leaf) or [])
    else:
        node[leaf] = list(node.get(leaf) or []) + items


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
    for group, parts in _groups(profile):
        live = _live(parts, labels)
        if not live:
            continue
        if group.target == "pod":
            _write(result, group.path, group.kind, live, labels)
            continue
        for field_name, containers in submitted.items():
            for container in containers:
                if group.target == "main" and (
                    field_name != "containers"
                    or container.get("name") != contract.KFP_MAIN_CONTAINER
                ):
                    continue
                _write(container, group.path, group.kind, live, labels)
    return result
