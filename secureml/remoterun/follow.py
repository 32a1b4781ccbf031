"""A run on a KFP server followed to its end: task states, admission refusals named by their rule,
the steps' audit records read from their logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from secureml.core.errors import ClusterError
from secureml.core.violation import Violation
from secureml.enforcement.audit import AuditRecord, records_from_log
from secureml.remoterun.host import Submission

# KFP's RuntimeState values (v2beta1)
SUCCEEDED = "SUCCEEDED"
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED")
# Argo node phases whose message says why the node did not run
_STOPPED_PHASES = ("Pending", "Failed", "Error")
# Argo's template of the pod that runs a step's own command (KFP's argocompiler)
EXECUTOR_TEMPLATE = "system-container-impl"
_REFUSED = " is forbidden: "


@dataclass(frozen=True)
class Refusal:
    """A step pod the cluster refused to create, and why (our rule ids where the message has them)."""

    step: str
    phase: str
    message: str
    findings: tuple[Violation, ...]


@dataclass
class Outcome:
    """What became of the run."""

    run_id: str
    url: str
    state: str = ""
    tasks: dict[str, str] = field(default_factory=dict)  # step -> KFP task state
    refusals: list[Refusal] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # step -> Argo's message
    records: dict[str, list[AuditRecord]] = field(default_factory=dict)  # step -> its records
    unreached: dict[str, str] = field(default_factory=dict)  # step -> why no record was read
    timed_out: bool = False
    seconds: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED and not self.refusals and not self.timed_out

    def violations(self) -> list[tuple[str, Violation]]:
        return [(r.step, finding) for r in self.refusals for finding in r.findings]


# (step, old state or None, new state)
Listener = Callable[[str, str | None, str], None]


def follow(
    submission: Submission,
    steps: list[str],
    *,
    timeout: float,
    poll: float,
    on_change: Listener,
) -> Outcome:
    """Poll the run until it ends, a step is refused at admission, or `timeout` seconds pass."""
    outcome = Outcome(submission.run_id, submission.host.run_url(submission.run_id))
    started = time.monotonic()
    while True:
        run = submission.get()
        state = str(run.state or "")
        for name, task_state in _task_states(run, steps).items():
            if outcome.tasks.get(name) != task_state:
                on_change(name, outcome.tasks.get(name), task_state)
                outcome.tasks[name] = task_state
        if state != outcome.state:
            on_change("run", outcome.state or None, state)
            outcome.state = state
        finished = state in FINISHED
        if finished or any(s in ("PENDING", "FAILED") for s in outcome.tasks.values()):
            workflow = submission.workflow()
            if workflow is not None:
                _read_nodes(workflow, outcome)
        outcome.seconds = time.monotonic() - started
        if finished or outcome.refusals:
            break
        if outcome.seconds >= timeout:
            outcome.timed_out = True
            break
        time.sleep(min(poll, max(timeout - outcome.seconds, 0.0)))
    _collect_records(submission, outcome, steps)
    return outcome


def _task_states(run: Any, steps: list[str]) -> dict[str, str]:
    """Each step's state from the run's task details (a step that KFP retried: its last)."""
    details = getattr(run.run_details, "task_details", None) if run.run_details else None
    states: dict[str, str] = {}
    for task in details or []:
        if task.display_name in steps and task.state:
            states[str(task.display_name)] = str(task.state)
    return {name: states[name] for name in steps if name in states}


def _nodes(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    return {str(k): v for k, v in nodes.items() if isinstance(v, dict)}


def _step_of(node: dict[str, Any], parents: dict[str, dict[str, Any]]) -> str:
    """The pipeline task a node belongs to: an executor pod's DAG node names it."""
    name = str(node.get("displayName") or node.get("name") or "")
    if node.get("templateName") == EXECUTOR_TEMPLATE and str(node.get("id")) in parents:
        return str(parents[str(node.get("id"))].get("displayName") or name)
    return name


def _parents(nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {child: node for node in nodes.values() for child in node.get("children") or []}


def _read_nodes(workflow: dict[str, Any], outcome: Outcome) -> None:
    """Refusals and failure messages from the Workflow's nodes."""
    from secureml.admission.server import message_findings

    nodes = _nodes(workflow)
    parents = _parents(nodes)
    outcome.refusals = []
    for node in nodes.values():
        message = str(node.get("message") or "")
        if node.get("type") != "Pod" or node.get("phase") not in _STOPPED_PHASES or not message:
            continue
        step = _step_of(node, parents)
        if _REFUSED in message:
            findings = tuple(message_findings(message))
            outcome.refusals.append(Refusal(step, str(node.get("phase")), message, findings))
        elif node.get("phase") != "Pending":
            outcome.failures[step] = message


def pod_name(workflow: dict[str, Any], node: dict[str, Any]) -> str:
    """The pod Argo created for `node` (KFP's RetrievePodName: Argo's v2 pod names)."""
    meta = workflow.get("metadata") or {}
    name = str(meta.get("name") or "")
    if (meta.get("annotations") or {}).get("workflows.argoproj.io/pod-name-format") == "v1":
        return str(node.get("id"))
    if node.get("name") == name:
        return name
    suffix = str(node.get("id")).rsplit("-", 1)[-1]
    prefix = name if ".inline" in str(node.get("name")) else f"{name}-{node.get('templateName')}"
    return f"{prefix}-{suffix}"


def _collect_records(submission: Submission, outcome: Outcome, steps: list[str]) -> None:
    """Each step pod's audit records from its log; what could not be read, and why."""
    workflow = submission.workflow()
    if workflow is None:
        for step in steps:
            outcome.unreached[step] = (
                "the server did not give the run's Argo Workflow (GET /apis/v1beta1/runs/ID), "
                "so the step pods are not known"
            )
        return
    nodes = _nodes(workflow)
    parents = _parents(nodes)
    namespace = str((workflow.get("metadata") or {}).get("namespace") or "")
    seen: set[str] = set()
    for node in nodes.values():
        if node.get("type") != "Pod" or node.get("templateName") != EXECUTOR_TEMPLATE:
            continue
        step = _step_of(node, parents)
        if step not in steps:
            continue
        seen.add(step)
        if _REFUSED in str(node.get("message") or ""):
            outcome.unreached[step] = "the step pod never ran: refused at admission"
            continue
        if node.get("phase") not in ("Succeeded", "Failed", "Error", "Running"):
            outcome.unreached[step] = f"the step pod never ran (Argo: {node.get('phase')})"
            continue
        pod = pod_name(workflow, node)
        try:
            found = records_from_log(submission.pod_log(pod, namespace))
        except ClusterError as err:
            outcome.unreached[step] = f"{err.what}: {err.why}"
            continue
        except ValueError:
            outcome.unreached[step] = f"pod log {pod}: a secureml-audit line is not JSON"
            continue
        if found:
            outcome.records.setdefault(step, []).extend(found)
        else:
            outcome.unreached[step] = f"pod log {pod}: no secureml-audit line"
    for step in steps:
        if step not in seen and step not in outcome.unreached:
            outcome.unreached[step] = "no step pod was created"
