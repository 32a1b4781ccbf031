"""`secureml run FILE --profile P --host URL`: compile, run on a KFP server, follow the run."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

import typer

from secureml.cli.output import NO, emit_json

if TYPE_CHECKING:
    from secureml.cli.compile import CompileInputs
    from secureml.remoterun.follow import Outcome
    from secureml.remoterun.host import Host

SCHEMA = "secureml.dev/run-remote/v1"
REQUEST_TIMEOUT = 10.0  # seconds for one request to the KFP server


@dataclass(frozen=True)
class HostRun:
    """Where and how to run: the server, the run's name and experiment, the wait."""

    url: str
    experiment: str
    run_name: str | None
    arguments: dict[str, str]
    timeout: float
    poll: float
    json: bool


class Progress:
    """Task states as they change: a live table on a terminal, one line per change in a pipe
    (stdout, or stderr when stdout carries the JSON document)."""

    def __init__(self, stream: TextIO, steps: list[str]) -> None:
        self._stream = stream
        self._steps = steps
        self._states: dict[str, str] = {}
        self._started = time.monotonic()
        self._live: Any = None
        if stream.isatty():
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._table(), console=Console(file=stream), auto_refresh=False, transient=False
            )
            self._live.start()

    def change(self, name: str, old: str | None, new: str) -> None:
        self._states[name] = new
        if self._live is not None:
            self._live.update(self._table(), refresh=True)
            return
        seconds = time.monotonic() - self._started
        what = "run" if name == "run" else f"step {name}"
        self._stream.write(f"[{seconds:6.1f}s] {what}: {old or 'new'} -> {new}\n")
        self._stream.flush()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title=f"run: {self._states.get('run', 'submitted')}", title_justify="left")
        table.add_column("step")
        table.add_column("state")
        for step in self._steps:
            table.add_row(step, self._states.get(step, "-"))
        return table


def run_on_host(inputs: CompileInputs, how: HostRun) -> None:
    """Compile, submit, follow; print the summary; exit 0, 1 or 2 (docs/cli.md)."""
    from secureml.cli.compile import compile_secured
    from secureml.remoterun.host import Submission, connect

    # before compiling: an unusable --host costs no compile; no one request outlasts --timeout
    host = connect(how.url, timeout=min(REQUEST_TIMEOUT, how.timeout))
    compiled = compile_secured(inputs)
    if compiled.result is None:
        from secureml.compile.report import render_text, violation_report

        data = violation_report(
            compiled.pipeline, compiled.tenant.metadata.name, compiled.violations
        )
        typer.echo(render_text(data), err=True, nl=False)
        typer.echo("error: not submitted: the pipeline breaks the profile's rules", err=True)
        raise typer.Exit(NO)
    result, tenant = compiled.result, compiled.tenant
    arguments = _bound(result.yaml_text, how.arguments, compiled.pipeline)
    steps = [step.task for step in result.steps if step.kind in ("secure", "plain")]
    submission = Submission(host, tenant.spec.namespace)
    name = how.run_name or f"{compiled.pipeline} {time.strftime('%Y-%m-%d %H-%M-%S')}"
    run_id = submission.create(
        result.yaml_text, run_name=name, experiment=how.experiment, arguments=arguments
    )
    out = sys.stderr if how.json else sys.stdout
    out.write(f"run {run_id} created on {host.url} as {_runner()}\nlogs: {host.run_url(run_id)}\n")
    out.flush()
    outcome = follow_run(submission, steps, how, out)
    if how.json:
        emit_json(as_json(outcome, compiled.pipeline, host, tenant.spec.namespace, how.experiment))
    else:
        print_summary(outcome)
    report_end(outcome, how.timeout)


def _bound(pipeline_yaml: str, arguments: dict[str, str], pipeline: str) -> dict[str, Any]:
    """The --arg values as the pipeline's declared types, checked before anything is submitted."""
    import yaml

    from secureml.compile.pipeline_args import bind_arguments

    spec = next(yaml.safe_load_all(pipeline_yaml))
    return bind_arguments(spec, arguments, pipeline=pipeline)


def _runner() -> str:
    from secureml.core import contract

    return f"service account {contract.RUNNER_NAME}"


def follow_run(submission: Any, steps: list[str], how: HostRun, out: TextIO) -> Outcome:
    from secureml.remoterun.follow import follow

    progress = Progress(out, steps)
    try:
        return follow(
            submission, steps, timeout=how.timeout, poll=how.poll, on_change=progress.change
        )
    finally:
        progress.stop()


def print_summary(outcome: Outcome) -> None:
    from secureml.components.audit_report import render_text

    typer.echo(
        f"\nrun {outcome.run_id}: {outcome.state or 'unknown'} after {outcome.seconds:.1f} s"
    )
    records = [r for step in outcome.records.values() for r in step]
    if records:
        typer.echo(render_text(records))
    for step, why in sorted(outcome.unreached.items()):
        typer.echo(f"no audit record read for {step}: {why}")
    typer.echo(f"logs: {outcome.url}")


def report_end(outcome: Outcome, timeout: float) -> None:
    """The verdict on stderr and the exit: 0 succeeded, 1 refused, failed or timed out."""
    for step, finding in outcome.violations():
        typer.echo(
            f"error: step {step} refused at admission: [{finding.rule}] {finding.what}", err=True
        )
    for step, message in sorted(outcome.failures.items()):
        typer.echo(f"error: step {step} failed: {message}", err=True)
    if outcome.refusals:
        typer.echo(
            "fix: compile the pipeline again with `secureml compile` against the profile the "
            "cluster's bundle was rendered from (`secureml doctor cluster` shows drift); the run "
            f"stays in KFP until it ends or is terminated: {outcome.url}",
            err=True,
        )
    elif outcome.timed_out:
        waiting = [
            f"{s} {t}" for s, t in outcome.tasks.items() if t not in ("SUCCEEDED", "SKIPPED")
        ]
        typer.echo(
            f"error: the run did not end within --timeout {timeout:g} s (run "
            f"{outcome.state or 'unknown'}; {', '.join(waiting) or 'no step started'}); it goes "
            f"on in KFP: {outcome.url}",
            err=True,
        )
    elif not outcome.succeeded:
        typer.echo(f"error: the run ended {outcome.state or 'unknown'}: {outcome.url}", err=True)
    raise typer.Exit(0 if outcome.succeeded else NO)


def as_json(
    outcome: Outcome, pipeline: str, host: Host, namespace: str, experiment: str
) -> dict[str, Any]:
    from secureml.components.audit_report import summarize
    from secureml.core import contract

    return {
        "schema": SCHEMA,
        "pipeline": pipeline,
        "host": host.url,
        "multiUser": host.multi_user,
        "namespace": namespace if host.multi_user else None,
        "experiment": experiment,
        "serviceAccount": contract.RUNNER_NAME,
        "runId": outcome.run_id,
        "runUrl": outcome.url,
        "state": outcome.state,
        "succeeded": outcome.succeeded,
        "timedOut": outcome.timed_out,
        "seconds": round(outcome.seconds, 3),
        "tasks": dict(outcome.tasks),
        "violations": [
            {"step": step, "rule": v.rule, "what": v.what} for step, v in outcome.violations()
        ],
        "failures": dict(outcome.failures),
        "steps": [asdict(summarize(r)) for records in outcome.records.values() for r in records],
        "stepsWithoutRecord": dict(outcome.unreached),
    }
