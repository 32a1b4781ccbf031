"""Verdicts on pods, whoever judged them: the offline rule engine or a real API server.

`check-pod` prints the same table and JSON for both: one `PodVerdict` per pod (allowed, or denied
with `(rule id, message)` violations), aggregated by `summary`, `table` and `json_report` here so
the offline and the server check cannot drift apart in what they report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from secureml.workloads import PodObject

if TYPE_CHECKING:
    from secureml.rules import Rule

ALLOWED = "allowed"
DENIED = "denied"


@dataclass(frozen=True)
class Finding:
    """Why a pod is denied: a rule id (`pss.*`, `secureml.*`, or `k8s.*` for the API server's own
    checks) and the message for this pod."""

    rule_id: str
    message: str


@dataclass(frozen=True)
class PodVerdict:
    """One pod and what was decided about it; `admitted` is the pod as the server would store it
    (after mutation), when a server judged it and allowed it."""

    pod: PodObject
    findings: tuple[Finding, ...] = ()
    admitted: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def verdict(self) -> str:
        return DENIED if self.findings else ALLOWED

    @property
    def rule_ids(self) -> list[str]:
        return [finding.rule_id for finding in self.findings]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.pod.kind,
            "name": self.pod.name,
            "namespace": self.pod.namespace,
            "file": self.pod.file,
            "doc_index": self.pod.doc_index,
            "verdict": self.verdict,
            "violations": [{"rule": f.rule_id, "message": f.message} for f in self.findings],
        }


def judge_offline(pods: Iterable[PodObject], rules: Sequence[Rule]) -> list[PodVerdict]:
    """Each pod judged by the CEL rule engine against `rules`."""
    from secureml.rules import evaluate

    return [
        PodVerdict(pod, tuple(Finding(v.rule_id, v.message) for v in evaluate(pod.pod, rules)))
        for pod in pods
    ]


def summary(verdicts: Sequence[PodVerdict]) -> dict[str, int]:
    denied = sum(1 for v in verdicts if v.findings)
    return {"objects": len(verdicts), "allowed": len(verdicts) - denied, "denied": denied}


def json_report(
    verdicts: Sequence[PodVerdict], policy: dict[str, Any], rules: list[str]
) -> dict[str, Any]:
    """`check-pod --format json`: the policy that judged, its rule ids, each object, the counts."""
    return {
        "policy": policy,
        "rules": rules,
        "objects": [v.as_dict() for v in verdicts],
        "summary": summary(verdicts),
    }


def table(verdicts: Sequence[PodVerdict]) -> str:
    """`check-pod`'s table: one line per pod, one indented line per violation, then the counts."""
    lines = []
    for v in verdicts:
        where = f"{v.pod.file}#{v.pod.doc_index}"
        lines.append(f"{v.verdict.upper():8} {v.pod.kind}/{v.pod.name}  ({where})")
        lines.extend(f"    {f.rule_id}: {f.message}" for f in v.findings)
    counts = summary(verdicts)
    lines.append(
        f"{counts['objects']} object(s): {counts['allowed']} allowed, {counts['denied']} denied"
    )
    return "\n".join(lines)
