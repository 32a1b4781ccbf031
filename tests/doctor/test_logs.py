"""`secureml doctor logs`: driver events in kernel and step logs, classified with the Xid table.

The log lines follow the formats NVIDIA's driver prints (docs/xid.md): `NVRM: Xid (PCI:...): N,
pid=..., name=..., <text>` since R470, the older form without pid/name and without `PCI:`,
`pid='<unknown>'`, the "fallen off the bus" and API-mismatch messages, under the prefixes
journalctl, dmesg and dmesg -T add.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from secureml.doctor.logs import diagnose, parse_line, scan
from secureml.enforcement.audit import AUDIT_SCHEMA, write_audit_record
from tests.support.json_schemas import check as check_schema

runner = CliRunner()

JOURNAL = "May 18 19:02:39 gpu-node-3 kernel: "
ISO = "2026-05-18T19:02:39+0000 gpu-node-3 kernel: "
DMESG = "[ 5107.644336] "
DMESG_T = "[Mon May 18 19:02:39 2026] "

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
XID_48_OLD = (
    "NVRM: Xid (0000:01:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU "
    "in the framebuffer at partition 6, subpartition 0."
)
XID_13 = (
    "NVRM: Xid (PCI:0000:86:00): 13, pid=4242, name=train.py, Graphics SM Warp Exception on "
    "(GPC 1, TPC 0, SM 1): Out Of Range Address"
)
XID_64_UNKNOWN_PID = "NVRM: Xid (PCI:0000:65:00): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to remap row"
XID_63 = "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
XID_74 = "NVRM: Xid (PCI:0000:0f:00): 74, pid=1934, name=python3, NVLink: fatal error detected on link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
XID_145 = "NVRM: Xid (PCI:0000:1b:00): 145, RLW_REMAP NVLink: Link 2 error"
FALLEN_OFF = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
FALLEN_OFF_OLD = "NVRM: GPU at 0000:01:00.0 has fallen off the bus."
API_MISMATCH = (
    "NVRM: API mismatch: the client has the version 550.90.07, but NVRM: this kernel module has "
    "the version 550.54.15.  Please make sure that this kernel module and all NVIDIA driver "
    "components have the same version."
)
NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


@pytest.mark.parametrize("prefix", ["", JOURNAL, ISO, DMESG, DMESG_T])
def test_an_xid_line_is_read_under_every_log_prefix(prefix: str) -> None:
    kind, code, device, row, extra = parse_line(prefix + XID_79)  # type: ignore[misc]
    assert (kind, code, device) == ("xid", "79", "0000:3b:00")
    assert extra.get("pid") == 1234 and extra.get("process") == "python3"
    assert row is not None and row.xid_class == "device"  # type: ignore[union-attr]
    if prefix in (JOURNAL, ISO):
        assert extra["host"] == "gpu-node-3"


def test_the_older_formats_without_pid_or_pci_prefix() -> None:
    kind, code, device, row, extra = parse_line(DMESG + XID_48_OLD)  # type: ignore[misc]
    assert (kind, code, device) == ("xid", "48", "0000:01:00")
    assert "pid" not in extra and row.xid_class == "memory"  # type: ignore[union-attr]
    _, code, _, row, extra = parse_line(JOURNAL + XID_64_UNKNOWN_PID)  # type: ignore[misc]
    assert code == "64" and "pid" not in extra and "process" not in extra
    assert row.action == "replace"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "xid_class", "status"),
    [
        (XID_13, "application", "warn"),
        (XID_63, "memory", "fail"),
        (XID_74, "nvlink", "fail"),
        (XID_145, "nvlink", "fail"),
        (XID_79, "device", "fail"),
        ("NVRM: Xid (PCI:0000:3b:00): 14, pid=1, name=x, fake", "unclassified", "warn"),
    ],
)
def test_each_class_and_its_status(line: str, xid_class: str, status: str) -> None:
    (finding,), lines = scan([JOURNAL + line])
    assert lines == 1
    assert finding.row is not None and finding.row.xid_class == xid_class
    assert finding.status == status


def test_fallen_off_the_bus_and_its_xid_79_are_one_event() -> None:
    findings, _ = scan(
        [JOURNAL + XID_79, JOURNAL + FALLEN_OFF, JOURNAL + FALLEN_OFF, DMESG + FALLEN_OFF_OLD]
    )
    assert [(f.code, f.device, f.count) for f in findings] == [
        ("79", "0000:3b:00", 3),
        ("79", "0000:01:00", 1),
    ]
    assert findings[0].pids == {1234} and findings[0].first_line == 1
    assert findings[1].kind == "fallen-off-bus" and findings[1].status == "fail"


@pytest.mark.parametrize("line", [JOURNAL + API_MISMATCH, NVML_MISMATCH])
def test_a_driver_library_mismatch_needs_action(line: str) -> None:
    report, (finding,), _ = diagnose(line + "\n", "kern.log")
    assert finding.kind == "driver-mismatch" and report.exit_code() == 1
    assert "reboot the node" in report.checks[0].fix


@pytest.mark.parametrize(
    ("line", "name", "status"),
    [
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "illegal-address",
            "warn",
        ),
        ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access", "illegal-address", "warn"),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
            "total capacity of 79.15 GiB of which 61.50 GiB is free.",
            "out-of-memory",
            "warn",
        ),
        (
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "ecc-uncorrectable",
            "fail",
        ),
        ("RuntimeError: CUDA error: device-side assert triggered", "device-assert", "warn"),
    ],
)
def test_cuda_errors_in_a_step_log(line: str, name: str, status: str) -> None:
    (finding,), _ = scan([line])
    assert (finding.kind, finding.code, finding.status) == ("cuda-error", name, status)


def test_the_time_slice_quota_is_the_fix_for_out_of_memory_with_room_left() -> None:
    report, _, _ = diagnose("CUDA out of memory. Tried to allocate 20.00 MiB\n", "step.log")
    assert "TimeSlice memory" in report.checks[0].fix and report.exit_code() == 0


def test_a_clean_log_passes() -> None:
    report, findings, lines = diagnose(
        "kernel: eth0 up\nNVRM: loading NVIDIA UNIX x86_64 Kernel Module\n", "k"
    )
    assert findings == [] and lines == 2
    assert [c.status for c in report.checks] == ["pass"] and report.exit_code() == 0


def _record(tmp_path: Path, pids: list[int], step: str) -> None:
    write_audit_record(
        {  # type: ignore[typeddict-item]
            "schema": AUDIT_SCHEMA,
            "run_id": f"run-{step}",
            "tenant": "team-a",
            "namespace": "team-a",
            "pipeline": "finetune",
            "step": step,
            "started_at": "2026-05-18T19:00:00.000+00:00",
            "pids": pids,
        },
        tmp_path,
    )


def _invoke(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["doctor", "logs", *args], input=stdin)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout


def test_cli_names_the_tenant_and_step_of_the_pid(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    _record(audit, [1234, 1240], "train")
    _record(audit, [77], "evaluate")
    log = tmp_path / "kern.log"
    log.write_text("\n".join([JOURNAL + XID_79, JOURNAL + XID_13, "unrelated"]) + "\n")
    code, out = _invoke(str(log), "--audit-dir", str(audit), "--format", "json")
    assert code == 1
    document = json.loads(out)
    check_schema("doctor-logs", document)
    events = {e["code"]: e for e in document["events"]}
    assert [(s["tenant"], s["step"], s["pid"]) for s in events["79"]["steps"]] == [
        ("team-a", "train", 1234)
    ]
    assert events["13"]["steps"] == [] and events["13"]["pids"] == [4242]
    assert events["79"]["xid"]["sources"] == ["catalog", "nvsentinel"]
    code, text = _invoke(str(log), "--audit-dir", str(audit))
    assert code == 1 and "team-a/finetune/train" in text


def test_cli_reads_stdin_and_the_logs_own_audit_lines() -> None:
    record = {
        "schema": AUDIT_SCHEMA,
        "run_id": "r1",
        "tenant": "team-b",
        "pipeline": "p",
        "step": "s",
        "pids": [4242],
    }
    stdin = DMESG + XID_13 + "\nsecureml-audit: " + json.dumps(record) + "\n"
    code, out = _invoke("-", "--format", "json", stdin=stdin)
    document = json.loads(out)
    check_schema("doctor-logs", document)
    assert code == 0  # an application fault is the step's own: nothing to do on the node
    assert document["status"] == "warn"
    assert document["events"][0]["steps"][0]["tenant"] == "team-b"


def test_cli_unusable_input_is_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["doctor", "logs", str(tmp_path / "missing.log")])
    assert result.exit_code == 2 and "cannot read the log" in result.output
    log = tmp_path / "k.log"
    log.write_text("")
    result = runner.invoke(app, ["doctor", "logs", str(log), "--audit-dir", str(tmp_path / "no")])
    assert result.exit_code == 2 and "audit folder" in result.output


def test_piped_text_is_wrapped_and_json_keeps_each_line_whole(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("\n".join([JOURNAL + XID_79, JOURNAL + XID_13]) + "\n")
    code, text = _invoke(str(log))
    assert code == 1
    assert max(len(line) for line in text.splitlines()) <= 120, text
    code, out = _invoke(str(log), "--format", "json")
    assert XID_79.strip() in out.replace('\\"', '"')


def test_doctor_logs_needs_no_pid_namespace_of_its_own(tmp_path: Path) -> None:
    """Issue 34, point 23: `doctor logs --audit-dir` reads the log and the records and nothing of
    /proc, so in a pod it needs no particular PID namespace (no hostPID): run in a PID namespace
    of its own (unshare, with its own /proc) it prints exactly what it prints here. Which
    namespace the *pids* are from is the records' matter (docs/xid.md)."""
    import os
    import shutil
    import subprocess
    import sys

    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI runs as root with util-linux's unshare")
        pytest.skip("needs root and unshare(1) for a PID namespace of its own")
    audit = tmp_path / "audit"
    _record(audit, [1234], "train")
    log = tmp_path / "kern.log"
    log.write_text(JOURNAL + XID_79 + "\n")
    argv = [sys.executable, "-m", "secureml", "doctor", "logs", str(log), "--audit-dir", str(audit),
            "--format", "json"]  # fmt: skip
    here = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    inside = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", *argv], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert (here.returncode, inside.returncode) == (1, 1), inside.stderr
    assert json.loads(inside.stdout) == json.loads(here.stdout)
    probe = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.stdout.strip() == "1"  # it was a PID namespace of its own
    steps = json.loads(inside.stdout)["events"][0]["steps"]
    assert [(s["step"], s["pid"]) for s in steps] == [("train", 1234)]
