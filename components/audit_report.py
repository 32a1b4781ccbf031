"""Turn the launcher's audit records (docs/audit.md) into a per-step summary: Markdown, HTML, text.

One `StepSummary` per record; the renderers only lay the same rows out differently, so the report
artifact of the `audit_report` component and the table `secureml run` prints always agree.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from secureml.enforcement.audit import STAGES, AuditRecord, load_audit_records
from secureml.gpu.request import GPURequestError, gpu_request_from_dict

# A file a simulated local run leaves in its audit folder: reports made from that folder later
# still label the GPU columns SIMULATED (the records themselves come from an unchanged launcher).
SIMULATION_MARKER = "SIMULATED-GPU.txt"

_STATUS_MARK = {"ok": "ok", "failed": "FAILED", "warning": "warn", "skipped": "-"}
COLUMNS = ("step", "result", "exit", "isolation", "gpu", *STAGES, "seconds", "violations")


@dataclass(frozen=True)
class StepSummary:
    """What one step's record says, reduced to what a person scans for."""

    pipeline: str
    step: str
    passed: bool
    exit_code: int | None
    failed_stage: str | None
    isolation: str
    gpu: str
    stages: dict[str, str]
    seconds: float | None
    violations: int
    spiffe_id: str
    simulated_gpu: bool

    @property
    def result(self) -> str:
        if self.passed:
            return "passed"
        return f"FAILED at {self.failed_stage}" if self.failed_stage else "FAILED"

    def cells(self) -> tuple[str, ...]:
        gpu = f"{self.gpu} (SIMULATED)" if self.simulated_gpu and self.gpu != "-" else self.gpu
        return (
            self.step,
            self.result,
            "-" if self.exit_code is None else str(self.exit_code),
            self.isolation,
            gpu,
            *(self.stages.get(name, "-") for name in STAGES),
            "-" if self.seconds is None else f"{self.seconds:.2f}",
            str(self.violations),
        )


def describe_gpu(request: object) -> str:
    """A record's `gpu_request` as `MIG 1g.10gb x1`, `time-slice 16Gi/50%`, `whole x2 (H100)`;
    `-` for none, `invalid request` for one the launcher would not have accepted."""
    if not request:
        return "-"
    try:
        return gpu_request_from_dict(request, where="gpu_request").describe()
    except GPURequestError:
        return "invalid request"


def summarize(record: AuditRecord, *, simulated_gpu: bool = False) -> StepSummary:
    """The summary of one audit record; `simulated_gpu` marks GPU stages run on the fake driver."""
    stages = {
        entry.get("name", "?"): _STATUS_MARK.get(entry.get("status", ""), entry.get("status", "?"))
        for entry in record.get("stages", [])
    }
    failed = [
        entry.get("name") for entry in record.get("stages", []) if entry.get("status") == "failed"
    ]
    exit_code = record.get("exit_code")
    return StepSummary(
        pipeline=str(record.get("pipeline") or "-"),
        step=str(record.get("step") or "-"),
        passed=exit_code == 0,
        exit_code=exit_code,
        failed_stage=failed[0] if failed else None,
        isolation=str(record.get("isolation") or "-"),
        gpu=describe_gpu(record.get("gpu_request")),
        stages=stages,
        seconds=record.get("seconds"),
        violations=len(record.get("violations") or []),
        spiffe_id=str(record.get("spiffe_id") or "-"),
        simulated_gpu=simulated_gpu,
    )


def _notes(summaries: Sequence[StepSummary]) -> list[str]:
    notes = []
    if any(s.simulated_gpu and s.gpu != "-" for s in summaries):
        notes.append(
            "GPU stages marked SIMULATED ran against the fake CUDA driver and fake NVML "
            "(device memory kept in host memory): they exercise the checks, not a real GPU."
        )
    failed = [s for s in summaries if not s.passed]
    notes.append(
        f"{len(summaries) - len(failed)} of {len(summaries)} step(s) passed"
        + (": " + ", ".join(f"{s.step} ({s.result})" for s in failed) if failed else ".")
    )
    return notes


def render_text(records: Iterable[AuditRecord], *, simulated_gpu: bool = False) -> str:
    """The table (`secureml.core.text_table`, at its natural width), then the identities and notes."""
    summaries = [summarize(r, simulated_gpu=simulated_gpu) for r in records]
    if not summaries:
        return "no audit records: no secure step ran under the launcher"
    from secureml.core.text_table import render_table

    lines = render_table(COLUMNS, [s.cells() for s in summaries]).splitlines()
    identities = [f"  {s.step}: {s.spiffe_id}" for s in summaries if s.spiffe_id != "-"]
    if identities:
        lines += ["", "identities (X.509-SVID checked by the launcher):", *identities]
    return "\n".join([*lines, "", *_notes(summaries)])


def render_markdown(
    records: Iterable[AuditRecord], *, title: str, simulated_gpu: bool = False
) -> str:
    summaries = [summarize(r, simulated_gpu=simulated_gpu) for r in records]
    lines = [f"# {title}", ""]
    if not summaries:
        return "\n".join([*lines, "No audit records: no secure step ran under the launcher.", ""])
    lines += [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
        *(
            "| " + " | ".join(cell.replace("|", "\\|") for cell in s.cells()) + " |"
            for s in summaries
        ),
        "",
        "## Identities",
        "",
        *(f"- `{s.step}`: `{s.spiffe_id}`" for s in summaries),
        "",
        *(f"> {note}" for note in _notes(summaries)),
        "",
    ]
    return "\n".join(lines)


def render_html(records: Iterable[AuditRecord], *, title: str, simulated_gpu: bool = False) -> str:
    summaries = [summarize(r, simulated_gpu=simulated_gpu) for r in records]
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = "".join(
        f'<tr class="{"passed" if s.passed else "failed"}">'
        + "".join(f"<td>{esc(cell)}</td>" for cell in s.cells())
        + "</tr>"
        for s in summaries
    )
    notes = (
        "".join(f"<p>{esc(note)}</p>" for note in _notes(summaries))
        if summaries
        else ("<p>No audit records: no secure step ran under the launcher.</p>")
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:2px 6px}"
        "tr.failed{background:#fdd}</style></head><body>"
        f"<h1>{esc(title)}</h1><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"{notes}</body></html>\n"
    )


def write_reports(
    audit_dir: str | Path,
    markdown_path: str | Path,
    html_path: str | Path,
    *,
    title: str,
    simulated_gpu: bool = False,
) -> list[AuditRecord]:
    """Load every record under `audit_dir` and write both reports; return the records.

    GPU columns are labelled SIMULATED when `simulated_gpu` is set or the folder carries the
    marker of a simulated local run.
    """
    records = load_audit_records(audit_dir)
    simulated_gpu = simulated_gpu or (Path(audit_dir) / SIMULATION_MARKER).is_file()
    Path(markdown_path).write_text(
        render_markdown(records, title=title, simulated_gpu=simulated_gpu)
    )
    Path(html_path).write_text(render_html(records, title=title, simulated_gpu=simulated_gpu))
    return records
