"""A server's refusal of one object, as a secureml error naming the object, the field and why."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from secureml.cluster.connection import ServerRefusedError
from secureml.cluster.requirements import COMPONENTS, api_group
from secureml.core.errors import SecuremlError

_FIXES = {
    "Conflict": "another field manager owns these fields; change them back, or take them over "
    "with --force-conflicts",
    "Invalid": "the bundle does not fit this server's schema: render it for the server's "
    "Kubernetes version (--k8s-version) or report it as a secureml bug",
    "Forbidden": "the kubeconfig user may not write this object, or an admission policy refused "
    "it; see the message",
    "NotFound": "create what the object refers to first (its namespace, its CRD)",
}


def object_ref(obj: Mapping[str, Any]) -> str:
    """`Kind/name` (`Kind/namespace/name` for namespaced objects) of a manifest."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    namespace = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{namespace}/{name}" if namespace else f"{obj['kind']}/{name}"


MAX_LINES_PER_CAUSE = 6
# `Invalid value: "<the whole value, quoted>": why`: the value can be a page of CEL.
_QUOTED_VALUE = re.compile(r'^(Invalid value|Unsupported value): "(?:[^"\\]|\\.)*"(: )?')
# CEL compiler output echoes the expression and a caret line under each error.
_ECHO = re.compile(r"^\s*\|")


def field_problems(refusal: ServerRefusedError) -> list[str]:
    """`field: message` per cause of the Status (the message alone when it names no field).

    The echoed value and CEL's source excerpts are left out; at most `MAX_LINES_PER_CAUSE`
    lines of each cause are kept.
    """
    problems = []
    for cause in refusal.causes:
        text = str(cause.get("message") or cause.get("reason") or "")
        text = _QUOTED_VALUE.sub(lambda m: m.group(1) + (": " if m.group(2) else ""), text)
        lines = [line.strip() for line in text.splitlines() if not _ECHO.match(line)]
        lines = [line for line in lines if line]
        if len(lines) > MAX_LINES_PER_CAUSE:
            more = len(lines) - MAX_LINES_PER_CAUSE
            lines = [*lines[:MAX_LINES_PER_CAUSE], f"... ({more} more line(s))"]
        where = cause.get("field")
        head = f"{where}: " if where else ""
        problems.append(head + "\n         ".join(lines))
    return problems


def refusal_error(
    obj: Mapping[str, Any], refusal: ServerRefusedError, *, action: str
) -> SecuremlError:
    """The error for `refusal` of `action` (e.g. "apply") on the manifest `obj`."""
    problems = field_problems(refusal)
    # With causes, the top message only repeats them (with the whole value): the causes say it.
    why = "\n       ".join(problems) if problems else refusal.message
    return SecuremlError(
        f"the API server refused to {action} {object_ref(obj)} "
        f"({refusal.code} {refusal.reason or 'error'})",
        why=why,
        fix=_fix(obj, refusal),
    )


def _fix(obj: Mapping[str, Any], refusal: ServerRefusedError) -> str:
    component = COMPONENTS.get(api_group(str(obj.get("apiVersion", ""))))
    if component is not None and "conversion webhook" in refusal.message:
        # The CRD is installed, but the component that serves its conversion webhook is not up.
        return (
            f"{component.name} is installed but not running (its webhook is unreachable): start it"
        )
    return _FIXES.get(refusal.reason, "see the server's message above")
