"""Verdicts on pods, whoever judged them: the offline rule engine or a real API server.

One `PodVerdict` per pod (allowed, or denied with `(rule id, message)` findings) whichever judged,
so the offline and the server check cannot drift apart in what they report; `secureml.podcheck`
aggregates them into `check-pod`'s report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from secureml.violation import Violation
from secureml.workloads import PodObject

if TYPE_CHECKING:
    from secureml.rules import Rule

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


def judge_offline(pods: Iterable[PodObject], rules: Sequence[Rule]) -> list[PodVerdict]:
    """Each pod judged by the CEL rule engine against `rules`."""
    from secureml.rules import evaluate

    return [PodVerdict(pod, tuple(evaluate(pod.pod, rules))) for pod in pods]
