"""The operations of a profile's mutations grouped by target and path: one JSON-patch operation each.

Both the Python applier and the CEL compiler work on groups, so they agree on what a conflict is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from secureml.pods.mutation.model import LabelIs, Operation, PodMutation, Target


@dataclass(frozen=True)
class Group:
    target: Target
    path: tuple[str, ...]
    kind: Literal["set", "append", "prepend"]
    parts: tuple[tuple[LabelIs | None, Any], ...]  # (condition, value or items) in order


def group_operations(mutations: Iterable[PodMutation]) -> list[Group]:
    order: list[tuple[Target, tuple[str, ...]]] = []
    found: dict[tuple[Target, tuple[str, ...]], list[Operation]] = {}
    for mutation in mutations:
        for op in mutation.operations:
            key = (op.target, op.path)
            if key not in found:
                order.append(key)
                found[key] = []
            found[key].append(op)
    groups = []
    for key in order:
        ops = found[key]
        kinds = {op.kind for op in ops}
        if len(kinds) != 1 or (kinds == {"set"} and len(ops) != 1):
            raise ValueError(f"conflicting mutations of {key}")
        groups.append(Group(key[0], key[1], ops[0].kind, tuple((op.when, op.value) for op in ops)))
    _check_disjoint(groups)
    return groups


def _check_disjoint(groups: list[Group]) -> None:
    """Operations computed from the submitted pod must not create the same missing parent."""
    for i, first in enumerate(groups):
        for second in groups[i + 1 :]:
            if _shared_target(first.target, second.target):
                common = 0
                for a, b in zip(first.path, second.path, strict=False):
                    if a != b:
                        break
                    common += 1
                # The pod's `spec` and `metadata` always exist; below them paths must split at once.
                floor = 1 if first.target == "pod" else 0
                if common > floor:
                    raise ValueError(f"mutations of {first.path} and {second.path} overlap")


def _shared_target(a: Target, b: Target) -> bool:
    return a == b or {a, b} == {"containers", "main"}
