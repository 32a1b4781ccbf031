"""Writing and reading audit records (the reader is what reports and `secureml run` use)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.audit import (
    AUDIT_SCHEMA,
    AuditError,
    emit_audit_line,
    load_audit_records,
    records_from_log,
    write_audit_record,
)


def _record(step: str, started_at: str, run_id: str) -> dict[str, object]:
    return {
        "schema": AUDIT_SCHEMA,
        "pipeline": "fine tune/v1",
        "step": step,
        "started_at": started_at,
        "run_id": run_id,
        "exit_code": 0,
    }


def test_written_records_read_back_oldest_first(tmp_path: Path) -> None:
    later = _record("train", "2026-11-29T10:00:01.000+00:00", "b" * 12)
    earlier = _record("prep", "2026-11-29T10:00:00.000+00:00", "a" * 12)
    paths = [
        write_audit_record(later, tmp_path / "audit"),
        write_audit_record(earlier, tmp_path / "audit" / "sub"),
    ]

    assert load_audit_records(tmp_path / "audit") == [earlier, later]
    assert all(p.name.endswith(".audit.json") and "/" not in p.name for p in paths)
    assert paths[0].name.startswith("fine-tune-v1.train.")
    assert not list((tmp_path / "audit").glob(".audit-*"))  # no temporary file left behind


def test_missing_folder_has_no_records(tmp_path: Path) -> None:
    assert load_audit_records(tmp_path / "nothing") == []


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "cannot read"),
        (json.dumps({"schema": "other/v9"}), "not a secureml audit record"),
    ],
)
def test_bad_record_is_named(tmp_path: Path, content: str, fragment: str) -> None:
    bad = tmp_path / "x.audit.json"
    bad.write_text(content)
    with pytest.raises(AuditError) as caught:
        load_audit_records(tmp_path)
    assert fragment in caught.value.diagnostics() and str(bad) in caught.value.diagnostics()


def test_log_lines_round_trip() -> None:
    first = _record("prep", "2026-11-29T10:00:00.000+00:00", "a" * 12)
    second = _record("train", "2026-11-29T10:00:01.000+00:00", "b" * 12)
    stream = io.StringIO()
    stream.write("some step output\n")
    emit_audit_line(first, stream)
    stream.write("[stderr of the kfp runner] ")
    emit_audit_line(second, stream)

    lines = stream.getvalue().splitlines()
    assert lines[1].startswith(contract.AUDIT_LINE_PREFIX)
    assert records_from_log(stream.getvalue()) == [first, second]
