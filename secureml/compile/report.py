"""The compliance report of `secureml compile`: a table per step on the terminal, or JSON."""

from __future__ import annotations

import json
from typing import Any

from secureml.core.text_table import render_table
from secureml.core.violation import Violation
from secureml.gpu.request import gpu_request_from_dict


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


# Said once under the violations when an image's signature is missing or does not verify.
SIGNATURES_REQUIRED = (
    "why signatures: profile {profile} requires them (spec.images.signatures.required, the "
    "default), and the cluster's image policy refuses an unsigned image whoever submits the pod. "
    "In development, sign your image with cosign (`cosign sign --new-bundle-format IMAGE@sha256:...`"
    " and pass --fetch-bundles), or compile against a profile that does not require signatures, "
    "e.g. examples/profiles/team-a-dev.yaml (docs/supply-chain.md)"
)


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
        docs = {"docs/rules.md"} | {
            "docs/admission-rules.md"
            for v in violations
            if v["rule"].startswith(("secureml.", "pss."))
        }
        explain = "explain" if len(docs) > 1 else "explains"
        verdict = (
            f"{len(violations)} violation(s): not compiled ({' and '.join(sorted(docs, reverse=True))} "
            f"{explain} each rule)"
        )
        if any(v["rule"].startswith("image.signature") for v in violations):
            verdict += "\n" + SIGNATURES_REQUIRED.format(profile=report["profile"])
        return f"{title}\n" + "\n".join(blocks) + f"\n{verdict}\n"
    body = render_table(
        ["TASK", "KIND", "ISOLATION", "GPU", "SCHEDULING", "IDENTITY", "SIGNED BY", "CONTROLS"],
        step_rows(report),
    )
    admission = (
        "admission rules checked on previewed pods"
        if report.get("admissionChecked")
        else "admission rules not checked (compiled with check_admission=False)"
    )
    return f"{title}\n{body}\ncompliant: {len(report['steps'])} step(s); {admission}\n"


def step_rows(report: dict[str, Any]) -> list[list[str]]:
    """One table row per step of a compliant report."""
    return [
        [
            step["task"],
            step["kind"],
            step["isolation"],
            _gpu_cell(step),
            ", ".join(step["scheduling"]) or "-",
            "yes" if step["spiffe_id"] else "no",
            step["signature"]["signer"] if step.get("signature") else "-",
            ", ".join(step["controls"]) or "-",
        ]
        for step in report["steps"]
    ]


def _gpu_cell(step: dict[str, Any]) -> str:
    """What the step asked for and what its pod carries: `time-slice 8Gi/25% (nvidia.com/gpu.shared
    x1)`, `MIG 1g.10gb x1 (claim secureml-mig-1g-10gb)`, `-` without a GPU."""
    request = step.get("gpu_request")
    if not request:
        return step["resources"] or "-"
    asked = gpu_request_from_dict(request, where=f"step {step['task']}").describe()
    return f"{asked} ({step['resources']})" if step["resources"] else asked
