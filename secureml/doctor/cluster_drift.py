"""Is an object on the cluster as `profile render` writes it: projected onto the render, diffed."""

from __future__ import annotations

import difflib
import json
from typing import Any

from secureml.bundle.render import dump_documents
from secureml.core.quantity import parse_bytes

# Field managers that write what a cluster derives, not what a person or a tool chose.
_SYSTEM_MANAGERS = ("kube-apiserver", "kube-controller-manager")


def project(rendered: Any, stored: Any) -> Any:
    """`stored` cut down to the shape of `rendered` (docs/architecture.md, `doctor/`)."""
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            return stored
        return {
            key: project(value, stored[key]) for key, value in rendered.items() if key in stored
        }
    if isinstance(rendered, list):
        if not isinstance(stored, list):
            return stored
        common = [project(r, s) for r, s in zip(rendered, stored, strict=False)]
        return common + stored[len(rendered) :]
    return rendered if same_value(rendered, stored) else stored


def same_value(rendered: Any, stored: Any) -> bool:
    """Equal, or the same number or quantity written another way."""
    if rendered == stored:
        return True
    if isinstance(rendered, bool) or isinstance(stored, bool):
        return False
    if isinstance(rendered, (int, str)) and isinstance(stored, (int, str)):
        if str(rendered) == str(stored):
            return True
        try:
            return parse_bytes(rendered) == parse_bytes(stored)
        except ValueError:
            return False
    return False


def object_drift(rendered: dict[str, Any], stored: dict[str, Any], label: str) -> str:
    """Unified diff from the rendered object to the stored one's projection; empty when in sync.

    `label` names the object in the diff's header lines (`rendered/LABEL`, `cluster/LABEL`).
    """
    before = dump_documents([_unshared(rendered)])
    after = dump_documents([_unshared(project(rendered, stored))])
    if before == after:
        return ""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"rendered/{label}",
            tofile=f"cluster/{label}",
        )
    )


def _unshared(obj: Any) -> Any:
    """A copy without shared sub-objects, which YAML would write as anchors and aliases."""
    return json.loads(json.dumps(obj))


def editors(stored: dict[str, Any], own_manager: str) -> list[str]:
    """Field managers other than `own_manager` that wrote the object itself (not its status)."""
    names = {
        str(entry.get("manager") or "?")
        for entry in stored.get("metadata", {}).get("managedFields") or []
        if entry.get("manager") != own_manager
        and not entry.get("subresource")
        and entry.get("manager") not in _SYSTEM_MANAGERS
    }
    return sorted(names)
