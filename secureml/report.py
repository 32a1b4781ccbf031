"""The compliance report of `secureml compile`: a table per step on the terminal, the same as JSON.

A compliant report is `CompiledPipeline.report()`; a refused one `violation_report(...)`. Both have
`pipeline`, `profile`, `result` ("compliant" | "violations"), `steps` and `violations`.
"""

from __future__ import annotations

import json
from typing import Any

from secureml.compile_rules import Violation


def violation_report(pipeline: str, profile: str, violations: list[Violation]) -> dict[str, Any]:
    return {
        "pipeline": pipeline,
        "profile": profile,
        "result": "violations",
        "steps": [],
        "violations": [v.to_dict() for v in violations],
    }


def to_json(report: dict[str, Any]) -> str:
    """Stable JSON (sorted keys, two-space indent, trailing newline): byte-identical across runs."""
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(header), *(len(row[i]) for row in rows)) if rows else len(header)
        for i, header in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(row) for row in rows)])


def render_text(report: dict[str, Any]) -> str:
    """The terminal form: one row per step (or per violation), then a one-line verdict."""
    title = f"pipeline {report['pipeline']}  profile {report['profile']}"
    if report["violations"]:
        violations = report["violations"]
        width = max(len(v["task"]) for v in violations)
        blocks = [
            f"{v['task'].ljust(width)}  [{v['rule']}] {v['what']}\n{' ' * width}  fix: {v['fix']}"
            for v in violations
        ]
        verdict = f"{len(violations)} violation(s): not compiled (docs/rules.md explains each rule)"
        return f"{title}\n" + "\n".join(blocks) + f"\n{verdict}\n"
    rows = []
    for step in report["steps"]:
        gpu = step["resources"] or "-"
        signer = step["signature"]["signer"] if step.get("signature") else "-"
        rows.append(
            [
                step["task"],
                step["kind"],
                step["isolation"],
                gpu,
                ", ".join(step["scheduling"]) or "-",
                "yes" if step["spiffe_id"] else "no",
                signer,
                ", ".join(step["controls"]) or "-",
            ]
        )
    body = _table(
        ["TASK", "KIND", "ISOLATION", "GPU", "SCHEDULING", "IDENTITY", "SIGNED BY", "CONTROLS"],
        rows,
    )
    admission = (
        "admission rules checked on previewed pods"
        if report.get("admissionChecked")
        else "admission rules not checked (compiled with check_admission=False)"
    )
    return f"{title}\n{body}\ncompliant: {len(rows)} step(s); {admission}\n"
