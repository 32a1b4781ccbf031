"""`secureml doctor logs`: GPU driver events in a node's kernel log or a step's log, classified."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from secureml.core.errors import SecuremlError
from secureml.doctor.check import Check, Report, Status
from secureml.nvidia.xid import ACTION_TEXT, CATALOG_URL, XidRow, classify

LOGS_SCHEMA = "secureml.dev/doctor-logs/v1"
Kind = Literal["xid", "fallen-off-bus", "driver-mismatch", "cuda-error"]

_PCI = r"(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
XID_LINE = re.compile(rf"NVRM: Xid \({_PCI}\): (?P<xid>\d+)(?P<rest>.*)")
PID_FIELD = re.compile(r"pid='?(?P<pid>\d+|<unknown>|N/A)'?")
NAME_FIELD = re.compile(r"name=(?P<name>[^,]*)")
FALLEN_OFF = re.compile(rf"NVRM: GPU (?:at )?{_PCI}:? (?:GPU )?has fallen off the bus")
API_MISMATCH = re.compile(r"NVRM: API mismatch: the client has the version (?P<client>[\w.-]+)")
NVML_MISMATCH = re.compile(r"Failed to initialize NVML: Driver/library version mismatch")
# `May 18 19:02:39 node-3 kernel:` or `2026-05-18T19:02:39+0000 node-3 kernel:` (journalctl)
JOURNAL_HOST = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) (?P<host>\S+) kernel:"
)


@dataclass(frozen=True)
class CudaError:
    """A CUDA error an application logs, how to read it and whether the node needs action."""

    name: str
    pattern: re.Pattern[str]
    status: Status
    meaning: str
    fix: str


CUDA_ERRORS: tuple[CudaError, ...] = (
    CudaError(
        "illegal-address",
        re.compile(
            r"CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|an illegal memory access was encountered"
        ),
        "warn",
        "a kernel accessed memory it does not own (the driver logs Xid 13 or 31 beside it)",
        "debug the step (`CUDA_LAUNCH_BLOCKING=1`, compute-sanitizer) and restart it; the GPU "
        "stays in service unless a memory or device Xid came with it",
    ),
    CudaError(
        "out-of-memory",
        re.compile(r"CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"),
        "warn",
        "the step asked for more GPU memory than it may use",
        "on a time-sliced GPU the step's limit is its TimeSlice memory (the shim's quota), not the "
        "free memory nvidia-smi shows for the whole device: lower the batch size or raise the "
        "profile's share",
    ),
    CudaError(
        "ecc-uncorrectable",
        re.compile(
            r"CUDA_ERROR_ECC_UNCORRECTABLE|cudaErrorECCUncorrectable|uncorrectable ECC error encountered"
        ),
        "fail",
        "the GPU's memory had an uncorrectable ECC error while the application ran",
        ACTION_TEXT["drain-reset"],
    ),
    CudaError(
        "launch-failed",
        re.compile(r"CUDA_ERROR_LAUNCH_FAILED|cudaErrorLaunchFailure|unspecified launch failure"),
        "warn",
        "a kernel failed while it ran",
        "check the kernel log for an Xid at the same time; without one, debug and restart the step",
    ),
    CudaError(
        "device-assert",
        re.compile(r"device-side assert triggered|CUDA_ERROR_ASSERT"),
        "warn",
        "a kernel's own assertion failed (often an index out of range)",
        "fix the step's code or data (`CUDA_LAUNCH_BLOCKING=1` names the kernel) and restart it",
    ),
)


@dataclass
class Finding:
    """One event and its repeats: where it was seen, which step it hit, what to do."""

    kind: Kind
    code: str  # the Xid number, the CUDA error's name, or "driver-mismatch"
    device: str | None
    first_line: int
    example: str
    row: XidRow | None = None
    cuda: CudaError | None = None
    count: int = 0
    last_line: int = 0
    pids: set[int] = field(default_factory=set)
    processes: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> Status:
        if self.cuda is not None:
            return self.cuda.status
        if self.row is None:  # driver mismatch
            return "fail"
        return "warn" if self.row.xid_class in ("application", "unclassified") else "fail"

    def check(self) -> Check:
        where = f" on GPU {self.device}" if self.device else ""
        if self.row is not None:
            row = self.row
            name = f"xid.{row.xid}"
            title = f"Xid {row.xid} ({row.xid_class}){where}"
            meaning = row.summary + (f" [{row.mnemonic}]" if row.mnemonic else "")
            fix = ACTION_TEXT[row.action]
        elif self.cuda is not None:
            name, title = f"cuda.{self.cuda.name}", f"CUDA error {self.cuda.name}"
            meaning, fix = self.cuda.meaning, self.cuda.fix
        else:
            name, title = "driver.mismatch", "NVIDIA kernel module and user-space driver differ"
            meaning = (
                "the kernel module and the libraries the container loads are different versions"
            )
            fix = (
                "finish the driver upgrade: reboot the node (or reload the nvidia modules) so the "
                "kernel module matches the installed libraries, and keep the container toolkit's "
                "driver mount in step with it"
            )
        seen = f"{meaning}; {self.count} line(s), first at line {self.first_line}: {self.example}"
        if self.steps:
            seen += "; step(s): " + ", ".join(_step_name(step) for step in self.steps)
        elif self.pids:
            seen += "; pid(s) " + ", ".join(map(str, sorted(self.pids))) + " (no audit record)"
        return Check(name=name, title=title, status=self.status, seen=seen, fix=fix)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "code": self.code,
            "device": self.device,
            "status": self.status,
            "class": self.row.xid_class if self.row is not None else None,
            "action": self.row.action if self.row is not None else None,
            "xid": self.row.to_json() if self.row is not None else None,
            "count": self.count,
            "first_line": self.first_line,
            "last_line": self.last_line,
            "example": self.example,
            "pids": sorted(self.pids),
            "processes": sorted(self.processes),
            "hosts": sorted(self.hosts),
            "steps": self.steps,
        }


def _step_name(step: dict[str, Any]) -> str:
    return (
        f"{step.get('tenant')}/{step.get('pipeline')}/{step.get('step')} (run {step.get('run_id')})"
    )


def _device(pci: str | None) -> str | None:
    """`0000:3B:00.0` and `0000:3b:00` are the same GPU."""
    return pci.lower().split(".")[0] if pci else None


def parse_line(
    line: str,
) -> tuple[Kind, str, str | None, XidRow | CudaError | None, dict[str, Any]] | None:
    """One log line's event: (kind, code, device, row or CUDA error, extra fields) or None."""
    extra: dict[str, Any] = {}
    host = JOURNAL_HOST.match(line)
    if host:
        extra["host"] = host.group("host")
    if match := XID_LINE.search(line):
        rest = match.group("rest")
        if (pid := PID_FIELD.search(rest)) and pid.group("pid").isdigit():
            extra["pid"] = int(pid.group("pid"))
        if (name := NAME_FIELD.search(rest)) and not name.group("name").startswith("<"):
            extra["process"] = name.group("name").strip()
        xid = int(match.group("xid"))
        return "xid", str(xid), _device(match.group("pci")), classify(xid), extra
    if match := FALLEN_OFF.search(line):
        return "fallen-off-bus", "79", _device(match.group("pci")), classify(79), extra
    if API_MISMATCH.search(line) or NVML_MISMATCH.search(line):
        return "driver-mismatch", "driver-mismatch", None, None, extra
    for cuda in CUDA_ERRORS:
        if cuda.pattern.search(line):
            return "cuda-error", cuda.name, None, cuda, extra
    return None


def scan(lines: Iterable[str]) -> tuple[list[Finding], int]:
    """The findings of a log, in the order first seen, and the number of lines read."""
    findings: dict[tuple[str, str, str | None], Finding] = {}
    count = 0
    for count, raw in enumerate(lines, start=1):
        parsed = parse_line(raw)
        if parsed is None:
            continue
        kind, code, device, info, extra = parsed
        # Xid 79 and "fallen off the bus" are one event, told twice
        key = ("xid" if kind == "fallen-off-bus" else kind, code, device)
        finding = findings.get(key)
        if finding is None:
            finding = findings[key] = Finding(
                kind=kind,
                code=code,
                device=device,
                first_line=count,
                example=raw.strip()[:240],
                row=info if isinstance(info, XidRow) else None,
                cuda=info if isinstance(info, CudaError) else None,
            )
        finding.count += 1
        finding.last_line = count
        if "pid" in extra:
            finding.pids.add(extra["pid"])
        if "process" in extra:
            finding.processes.add(extra["process"])
        if "host" in extra:
            finding.hosts.add(extra["host"])
    return list(findings.values()), count


def steps_by_pid(records: Iterable[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """pid -> the steps (from audit records) whose processes it was (`pids`)."""
    index: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        step = {
            key: record.get(key)
            for key in (
                "tenant",
                "namespace",
                "pipeline",
                "step",
                "run_id",
                "started_at",
                "ended_at",
            )
        }
        step["audit_file"] = record.get("audit_file")
        for pid in set(record.get("pids", [])):
            index.setdefault(int(pid), []).append(step)
    return index


def diagnose(
    text: str, subject: str, records: Iterable[dict[str, Any]] = ()
) -> tuple[Report, list[Finding], int]:
    """Scan `text`, name the steps its pids belong to, and build the report."""
    findings, lines = scan(text.splitlines())
    index = steps_by_pid(records)
    for finding in findings:
        seen: set[str] = set()
        for pid in sorted(finding.pids):
            for step in index.get(pid, []):
                if str(step["run_id"]) not in seen:
                    seen.add(str(step["run_id"]))
                    finding.steps.append({**step, "pid": pid})
    report = Report(subject=subject)
    report.add(finding.check() for finding in findings)
    if not findings:
        report.add(
            Check(
                name="logs.clean",
                title="No GPU driver event",
                status="pass",
                seen=f"no Xid, fallen-off-the-bus, driver mismatch or CUDA error in {lines} line(s)",
            )
        )
    return report, findings, lines


def to_json(report: Report, findings: list[Finding], lines: int) -> dict[str, Any]:
    return {
        "schema": LOGS_SCHEMA,
        **report.to_json(),
        "lines": lines,
        "catalog": CATALOG_URL,
        "events": [finding.to_json() for finding in findings],
    }


def read_source(source: str) -> tuple[str, str]:
    """The log's text and its name; `-` is standard input."""
    import sys

    if source == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        data = Path(source).read_bytes()
    except OSError as err:
        raise SecuremlError(
            f"cannot read the log: {err.strerror or err}",
            fix="pass a readable file (`journalctl -k > kern.log`), or - with the log on stdin",
            where=source,
        ) from None
    return data.decode("utf-8", errors="replace"), source


def diagnose_logs(source: str, audit_dir: Path | None) -> tuple[Report, dict[str, Any], str]:
    """`secureml doctor logs`: the report, its JSON document and the title of its table."""
    from secureml.enforcement.audit import load_audit_records, records_from_log

    text, subject = read_source(source)
    records: list[dict[str, Any]] = [dict(r) for r in records_from_log(text)]
    if audit_dir is not None:
        if not audit_dir.is_dir():
            raise SecuremlError(
                "the audit folder does not exist",
                fix="pass the folder the launcher wrote its records to (SECUREML_AUDIT_DIR)",
                where=str(audit_dir),
            )
        records += [dict(r) for r in load_audit_records(audit_dir)]
    report, findings, lines = diagnose(text, subject, records)
    return report, to_json(report, findings, lines), f"doctor logs: {subject} ({lines} lines)"
