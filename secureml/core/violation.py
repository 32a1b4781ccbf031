"""A broken rule, the one value every check reports: compile rules, admission rules, signatures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule broken: its id (`gpu.mig-count`, `secureml.isolationLevel`, `pss.privileged`), what
    is wrong, how to fix it where the check knows, and the task it was found on where a compile
    found it (a pod judged by the admission rules is its caller's to name)."""

    rule: str
    what: str
    fix: str = ""
    task: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"task": self.task, "rule": self.rule, "what": self.what, "fix": self.fix}
