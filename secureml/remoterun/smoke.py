"""`secureml doctor pipeline`: a tiny secured pipeline run on the platform's own KFP, every step
checked admitted, run and audited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from secureml.doctor.check import Check, Report, Status

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent

    from secureml.core.violation import Violation
    from secureml.remoterun.follow import Outcome

PIPELINE_NAME = "secureml-doctor"
STEPS = ("hello", "check")


def smoke_pipeline(image: str) -> GraphComponent:
    """The doctor's pipeline, its steps running in `image` (digest-pinned, with Python)."""
    from secureml.remoterun.smoke_steps import build

    graph: GraphComponent = build(
        image, PIPELINE_NAME, "secureml doctor pipeline: a secured smoke test"
    )
    return graph


def compile_checks(violations: list[Violation]) -> list[Check]:
    """The compile, as a check: the doctor's pipeline must comply with the profile."""
    if not violations:
        return [
            Check("compile", "the doctor pipeline compiles for the profile", "pass", "compliant")
        ]
    return [
        Check(
            "compile",
            "the doctor pipeline compiles for the profile",
            "fail",
            "; ".join(f"{v.task}: [{v.rule}] {v.what}" for v in violations),
            fix="give an --image the profile allows (its registries, digest-pinned, signed where "
            "it requires signatures: --bundles or --fetch-bundles)",
        )
    ]


def run_report(report: Report, outcome: Outcome, timeout: float) -> Report:
    """Each step admitted, run and audited, and the run's end, as checks."""
    refused = {
        step: [f"[{f.rule}] {f.what}" for f in r.findings]
        for r in outcome.refusals
        for step in [r.step]
    }
    for step in STEPS:
        state = outcome.tasks.get(step, "never created")
        if step in refused:
            report.add(
                Check(
                    f"step.{step}.admitted",
                    f"step {step}: its pod admitted",
                    "fail",
                    "refused: " + "; ".join(refused[step]),
                    fix="the bundle and the profile disagree: `secureml doctor cluster --profiles "
                    "PROFILE` shows the drift; re-apply with `secureml profile apply`",
                )
            )
            continue
        ran = state == "SUCCEEDED"
        started = step in outcome.records or state in ("RUNNING", "SUCCEEDED", "FAILED")
        report.add(
            Check(
                f"step.{step}.admitted",
                f"step {step}: its pod admitted",
                "pass" if started else "fail",
                "created and started" if started else f"KFP task state {state}",
                fix="" if started else "see the run in the KFP UI: " + outcome.url,
            )
        )
        report.add(
            Check(
                f"step.{step}.ran",
                f"step {step}: ran to Succeeded",
                "pass" if ran else "fail",
                f"KFP task state {state}"
                + (f": {outcome.failures[step]}" if step in outcome.failures else ""),
                fix="" if ran else "read the step's log in the KFP UI: " + outcome.url,
            )
        )
        report.add(_audited(step, outcome))
    if outcome.timed_out:
        report.add(
            Check(
                "run",
                "the run ended",
                "fail",
                f"still {outcome.state or 'unknown'} after --timeout {timeout:g} s",
                fix=f"see why in the KFP UI: {outcome.url}",
            )
        )
    else:
        status: Status = "pass" if outcome.succeeded else "fail"
        report.add(
            Check("run", "the run ended Succeeded", status, f"{outcome.state} ({outcome.url})")
        )
    return report


def _audited(step: str, outcome: Outcome) -> Check:
    title = f"step {step}: its audit record read and passed"
    records = outcome.records.get(step, [])
    if not records:
        why = outcome.unreached.get(step, "no record")
        return Check(
            f"step.{step}.audited",
            title,
            "warn",
            why,
            fix="point --host at the KFP UI (ml-pipeline-ui serves the pods' logs at "
            "/k8s/pod/logs), or read them: kubectl logs POD -c main | secureml doctor logs -",
        )
    record = records[-1]
    failed = [s.get("name") for s in record.get("stages", []) if s.get("status") == "failed"]
    ok = record.get("exit_code") == 0 and not failed and not record.get("violations")
    seen = f"exit {record.get('exit_code')}, identity {record.get('spiffe_id') or '-'}"
    if failed:
        seen += f", failed stages {', '.join(str(f) for f in failed)}"
    return Check(
        f"step.{step}.audited",
        title,
        "pass" if ok else "fail",
        seen,
        fix="" if ok else "the launcher refused or the step failed: its record says which stage",
    )
