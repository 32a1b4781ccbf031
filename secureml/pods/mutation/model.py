"""The mutation data: what to write where, under which label condition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Target = Literal["pod", "containers", "main"]


@dataclass(frozen=True)
class FromLabel:
    """A value read from one of the pod's labels at admission."""

    key: str


@dataclass(frozen=True)
class LabelIs:
    """The pod's label `key` is one of `values` (any value when `values` is empty)."""

    key: str
    values: tuple[str, ...] = ()

    def holds(self, labels: dict[str, str]) -> bool:
        if self.key not in labels:
            return False
        return not self.values or labels[self.key] in self.values


@dataclass(frozen=True)
class Operation:
    """One change: `set` a value, `append` items or `prepend` them (before the list's own items,
    e.g. an init container that must run first) at `path` under `target`.

    `target`: `pod` (the path starts at the pod's root), `containers` (every container and init
    container), `main` (the KFP executor container, contract.KFP_MAIN_CONTAINER). The last path
    element may be a map key (e.g. an annotation name); every other one is a field name.
    """

    target: Target
    path: tuple[str, ...]
    kind: Literal["set", "append", "prepend"]
    value: Any
    when: LabelIs | None = None


@dataclass(frozen=True)
class PodMutation:
    name: str
    purpose: str
    operations: tuple[Operation, ...]
