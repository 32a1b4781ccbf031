"""The pod's own labels and annotations, as the kubelet writes them into the podinfo volume.

The tenant bundle's mutating policy mounts a downward-API volume read-only at
`contract.PODINFO_DIR`; besides the shim's limits it holds the pod's labels and annotations
(`contract.PODINFO_LABELS`, `contract.PODINFO_ANNOTATIONS`), one `key="value"` line each, the value
quoted the way Go's `strconv.Quote` does. The step cannot write them, and admission pins the
`secureml.dev/*` keys they carry (and keeps them from changing after creation), so the launcher
takes its pod-level settings from them rather than from its environment.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from secureml.core import contract
from secureml.core.errors import SecuremlError


class PodInfoError(SecuremlError):
    """A podinfo file exists but cannot be read or parsed: the launcher stops (fail closed)."""


@dataclass(frozen=True)
class PodInfo:
    """The pod's labels and annotations; empty when the files are absent (no mutating policy)."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    present: bool = False


def parse_downward_api(text: str, *, where: str) -> dict[str, str]:
    """`key="value"` lines (Go-quoted values) as a dict; `PodInfoError` naming the bad line."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        key, sep, quoted = line.partition("=")
        value: object = None
        if sep and quoted.startswith('"') and quoted.endswith('"') and len(quoted) >= 2:
            try:
                value = ast.literal_eval(quoted)
            except (ValueError, SyntaxError):
                value = None
        if not key or not isinstance(value, str) or key in values:
            raise PodInfoError(
                f'line {number} is not key="value" (once per key): {line[:80]!r}',
                why="the podinfo files are written by the kubelet from the pod's own metadata",
                where=where,
            )
        values[key] = value
    return values


def _read(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        raise PodInfoError(
            f"cannot read {path.name}: {err.strerror or err}", where=str(path)
        ) from None
    return parse_downward_api(text, where=str(path))


def read_podinfo(directory: Path = Path(contract.PODINFO_DIR)) -> PodInfo:
    """The labels and annotations files under `directory`; an empty `PodInfo` when neither exists."""
    labels = _read(directory / Path(contract.PODINFO_LABELS).name)
    annotations = _read(directory / Path(contract.PODINFO_ANNOTATIONS).name)
    if labels is None and annotations is None:
        return PodInfo()
    return PodInfo(labels or {}, annotations or {}, present=True)
