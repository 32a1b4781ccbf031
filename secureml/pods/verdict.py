"""Verdicts on pods, whoever judged them: the offline rule engine or a real API server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from secureml.core.violation import Violation
from secureml.pods.workloads import PodObject

ALLOWED = "allowed"
DENIED = "denied"


@dataclass(frozen=True)
class PodVerdict:
    """One pod and what was decided about it; `admitted` is the pod as the server would store it
    (after mutation), when a server judged it and allowed it."""

    pod: PodObject
    findings: tuple[Violation, ...] = ()  # rule ids pss.*, secureml.*, k8s.* (the server's)
    admitted: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def verdict(self) -> str:
        return DENIED if self.findings else ALLOWED

    @property
    def rule_ids(self) -> list[str]:
        return [finding.rule for finding in self.findings]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.pod.kind,
            "name": self.pod.name,
            "namespace": self.pod.namespace,
            "file": self.pod.file,
            "doc_index": self.pod.doc_index,
            "verdict": self.verdict,
            "violations": [{"rule": f.rule, "message": f.what} for f in self.findings],
        }
