"""The audit record: one JSON document per step run, written to a folder and to stderr.

docs/audit.md is the schema; `AuditRecord` and `StageRecord` type it, and `STAGES` names the
launcher's stages in the order they run, for the launcher and for every report (the audit-report
component, `secureml run`). The launcher builds the record; this module writes it (atomically, a
file name unique per run) and reads records back for reports (`load_audit_records`) and for logs
that only kept stderr (`records_from_log`). Typed dicts, not classes: the record stays the JSON
document it is, and the launcher's start stays cheap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO, TypedDict, cast

from secureml.core import contract
from secureml.core.errors import SecuremlError

AUDIT_SCHEMA = "secureml.dev/audit/v1"
AUDIT_SUFFIX = ".audit.json"
# The launcher's stages in the order they run (enforcement/launch.py; the audit is the record).
STAGES = (
    "config",
    "shim-claim",
    "identity",
    "verify-inputs",
    "preflight",
    "scrub-before",
    "shim",
    "run",
    "scrub-after",
)


class StageRecord(TypedDict, total=False):
    """One entry of `stages` (docs/audit.md, "Stage entries")."""

    name: str
    status: str  # ok | failed | warning | skipped
    required: bool
    reason: str  # skipped: why
    seconds: float
    error: str  # failed / warning: the diagnostics
    detail: dict[str, Any] | None  # ok: the stage's findings
    exit_code: int  # run
    signal: str  # run, killed by a signal
    watchdog: dict[str, Any]  # run, GPU steps
    xid_listener: dict[str, Any]  # run, GPU steps: the Xid events listened to (xid_events.py)


class AuditRecord(TypedDict, total=False):
    """One run of the launcher (docs/audit.md, "Fields")."""

    schema: str
    run_id: str
    host: str
    command: list[str]
    tenant: str
    namespace: str
    pipeline: str
    step: str
    image: str
    image_digest: str
    isolation: str
    expected_spiffe_id: str
    spiffe_id: str
    inputs: list[dict[str, Any]]  # verify-inputs: each input's digest, signer or error
    gpu_request: dict[str, object] | None  # secureml.gpu.request's to_dict()
    controls: dict[str, Any]
    gpu: dict[str, Any]
    limits: dict[str, Any] | None
    shim_launcher: dict[str, Any]
    shim_counters: dict[str, Any] | None
    shim_counters_error: str
    firewall_refused: int  # the shim's CUDA firewall refusals (shim_counters' firewall_refused)
    peak_gpu_memory_bytes: int
    pids: list[int]  # the step's processes the launcher saw (doctor logs maps an Xid's pid)
    xid_events: list[dict[str, Any]]  # only when NVML reported critical Xids during the step
    device_reset: dict[str, Any]  # only after an Xid that leaves device memory untrusted
    violations: list[dict[str, Any]]
    stages: list[StageRecord]
    child_exit_code: int | None
    exit_code: int
    started_at: str
    ended_at: str
    seconds: float
    audit_file: str | None
    audit_error: str


class AuditError(SecuremlError):
    """The audit record could not be written or read."""


def audit_file_name(record: AuditRecord) -> str:
    """`<pipeline>.<step>.<started_at>.<run_id>.audit.json`, safe as a file name, unique per run."""
    parts = [
        contract.label_value(str(record.get("pipeline") or "pipeline")) or "pipeline",
        contract.label_value(str(record.get("step") or "step")) or "step",
        contract.label_value(str(record["started_at"]).replace(":", "")),
        str(record["run_id"]),
    ]
    return ".".join(parts) + AUDIT_SUFFIX


def write_audit_record(record: AuditRecord, audit_dir: Path) -> Path:
    """Write `record` into `audit_dir` (created if needed) atomically; return the file's path."""
    import tempfile  # here, not at start: it pulls in shutil, bz2, lzma and random (~8 ms)

    try:
        audit_dir.mkdir(parents=True, exist_ok=True)
        target = audit_dir / audit_file_name(record)
        fd, tmp = tempfile.mkstemp(dir=audit_dir, prefix=".audit-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, target)
    except OSError as err:
        raise AuditError(
            f"cannot write the audit record into {audit_dir}: {err.strerror or err}",
            why="every step must leave an audit record",
            fix=f"make {contract.ENV_AUDIT_DIR} a writable folder (an emptyDir or output volume)",
            where=contract.ENV_AUDIT_DIR,
        ) from None
    return target


def emit_audit_line(record: AuditRecord, stream: TextIO) -> None:
    """Print the record as one grep-able line: `secureml-audit: {...}`."""
    stream.write(
        contract.AUDIT_LINE_PREFIX
        + json.dumps(record, sort_keys=True, separators=(",", ":"))
        + "\n"
    )
    stream.flush()


def records_from_log(text: str) -> list[AuditRecord]:
    """The audit records carried by `secureml-audit:` lines of a step's log, in order."""
    records: list[AuditRecord] = []
    for line in text.splitlines():
        _, found, payload = line.partition(contract.AUDIT_LINE_PREFIX)
        if found and payload.startswith("{"):
            records.append(json.loads(payload))
    return records


def load_audit_records(audit_dir: str | Path) -> list[AuditRecord]:
    """Every audit record in `audit_dir` (recursively), oldest first; `[]` when there is none.

    Raises `AuditError` naming the file when a record is not valid JSON or not a record.
    """
    root = Path(audit_dir)
    if not root.is_dir():
        return []
    records: list[AuditRecord] = []
    for path in sorted(root.rglob(f"*{AUDIT_SUFFIX}")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise AuditError(f"cannot read audit record: {err}", where=str(path)) from None
        if not isinstance(record, dict) or record.get("schema") != AUDIT_SCHEMA:
            raise AuditError(
                f"not a secureml audit record (schema must be {AUDIT_SCHEMA!r})", where=str(path)
            )
        records.append(cast(AuditRecord, record))
    records.sort(key=lambda item: (str(item.get("started_at", "")), str(item.get("run_id", ""))))
    return records
