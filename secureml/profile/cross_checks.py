"""Checks across several profiles read together (`profile validate`, `profile render`, `apply`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from secureml.core.errors import InputError

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile


def shared_namespaces(loaded: Sequence[tuple[Path, TenantProfile]]) -> list[str]:
    """One line per namespace that more than one of the profiles is for."""
    by_namespace: dict[str, list[str]] = {}
    for path, profile in loaded:
        by_namespace.setdefault(profile.spec.namespace, []).append(
            f"{path} (tenant {profile.metadata.name})"
        )
    return [
        f"namespace {namespace} is the namespace of {len(owners)} profiles: " + ", ".join(owners)
        for namespace, owners in sorted(by_namespace.items())
        if len(owners) > 1
    ]


def refuse_shared_namespaces(loaded: Sequence[tuple[Path, TenantProfile]]) -> None:
    """`InputError` when two of the profiles are for one namespace."""
    shared = shared_namespaces(loaded)
    if shared:
        raise InputError(
            "; ".join(shared),
            why="each bundle writes its tenant's Namespace, quota, network and admission policies "
            "for that namespace: two would overwrite one another and bind both tenants' rules to "
            "every pod there",
            fix="give each tenant its own namespace (spec.namespace), or keep one of the profiles",
        )
