"""One doctor finding (pass, warn, fail; seen; fix) and the report that holds them, as data."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "warn", "fail"]
_RANK: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True)
class Check:
    """One finding: `name` is a stable id (`driver.version`), `title` says it for people."""

    name: str
    title: str
    status: Status
    seen: str
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "seen": self.seen,
            "fix": self.fix,
        }


@dataclass
class Report:
    """The checks of one doctor run, in the order they ran."""

    subject: str
    checks: list[Check] = field(default_factory=list)

    def add(self, checks: Check | Iterable[Check]) -> None:
        if isinstance(checks, Check):
            self.checks.append(checks)
        else:
            self.checks.extend(checks)

    @property
    def worst(self) -> Status:
        return max((c.status for c in self.checks), key=_RANK.__getitem__, default="pass")

    def counts(self) -> dict[Status, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "warn", "fail")}

    def exit_code(self) -> int:
        return 1 if self.worst == "fail" else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "status": self.worst,
            "counts": self.counts(),
            "checks": [c.to_json() for c in self.checks],
        }
