"""The audit-report component, end to end: real launcher records in, kfp.local run, reports out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from secureml.components import audit_report_op
from secureml.components.audit_report import render_text, summarize
from secureml.core import contract
from secureml.enforcement.audit import load_audit_records


def _launch(audit_dir: Path, step: str, command: list[str]) -> int:
    """Run the real launcher around `command` as a step without a GPU; it writes one record."""
    env = {
        **os.environ,
        contract.ENV_TENANT: "team-a",
        contract.ENV_PIPELINE: "fine-tune",
        contract.ENV_STEP: step,
        contract.ENV_ISOLATION: contract.ISOLATION_NONE,
        contract.ENV_AUDIT_DIR: str(audit_dir),
        contract.ENV_IMAGE: "ghcr.io/acme/prep@sha256:" + "a" * 64,
    }
    proc = subprocess.run(
        [sys.executable, "-m", contract.LAUNCHER_MODULE, "--", *command],
        env=env,
        capture_output=True,
        timeout=60,
    )
    return proc.returncode


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("audit")
    assert _launch(folder, "prep", [sys.executable, "-c", "pass"]) == 0
    assert _launch(folder, "<train>", [sys.executable, "-c", "raise SystemExit(3)"]) == 3
    return folder


def test_summary_reads_the_launchers_records(audit_dir: Path) -> None:
    by_step = {s.step: s for s in map(summarize, load_audit_records(audit_dir))}
    assert by_step["prep"].passed and by_step["prep"].stages["run"] == "ok"
    assert by_step["prep"].stages["preflight"] == "-"  # skipped: no GPU
    failed = by_step["<train>"]
    assert not failed.passed and failed.exit_code == 3 and failed.failed_stage == "run"
    text = render_text(load_audit_records(audit_dir))
    assert "1 of 2 step(s) passed: <train> (FAILED at run)" in text


def test_report_component_runs_under_kfp_local(audit_dir: Path, tmp_path: Path) -> None:
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    report = audit_report_op(image="python:3.11")
    task = report(audit_dir=str(audit_dir), title="run 42")

    assert task.outputs["Output"] == 1  # one failed step
    markdown = Path(task.outputs["report_md"].path).read_text()
    page = Path(task.outputs["report_html"].path).read_text()
    assert markdown.startswith("# run 42\n")
    assert "| prep | passed | 0 | none |" in markdown
    assert "| <train> | FAILED at run | 3 |" in markdown
    assert "<td>&lt;train&gt;</td>" in page and "<train>" not in page
    assert '<tr class="failed">' in page
    metrics = task.outputs["metrics"].metadata
    assert metrics == {"steps": 2, "failed_steps": 1, "violations": 0}


def test_report_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    from secureml.components.audit_report import write_reports

    records = write_reports(tmp_path / "none", tmp_path / "r.md", tmp_path / "r.html", title="t")
    assert records == []
    assert "No audit records" in (tmp_path / "r.md").read_text()


def test_the_report_has_a_column_for_every_stage_the_launcher_records(audit_dir: Path) -> None:
    """One stage list (secureml.enforcement.audit.STAGES) for the launcher and the report: a step
    records every stage, in that order, and the report's columns include config and shim-claim."""
    from secureml.components.audit_report import COLUMNS
    from secureml.enforcement.audit import STAGES

    for record in load_audit_records(audit_dir):
        assert tuple(stage["name"] for stage in record["stages"]) == STAGES
    assert {"config", "shim-claim"} <= set(COLUMNS)
    assert [c for c in COLUMNS if c in STAGES] == list(STAGES)
    prep = next(s for s in map(summarize, load_audit_records(audit_dir)) if s.step == "prep")
    assert prep.stages["config"] == "ok" and prep.stages["shim-claim"] == "-"
    header = render_text(load_audit_records(audit_dir)).splitlines()[0].split()
    assert header[header.index("config") + 1] == "shim-claim"
