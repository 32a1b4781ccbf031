"""The launcher end to end on a step without a GPU: exit codes, signals, audit record, fail-closed.

Every test runs `python -m secureml.enforcement.launch -- ...` in its own process, the way the
compiled pod does.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from secureml.core import contract
from secureml.enforcement.audit import AUDIT_SCHEMA
from secureml.enforcement.launch import ExitCode

from .conftest import Launch, launcher_env

PY = sys.executable
STEP_ENV = {
    contract.ENV_TENANT: "team-a",
    contract.ENV_NAMESPACE: "team-a-ns",
    contract.ENV_PIPELINE: "fine-tune",
    contract.ENV_STEP: "prep",
    contract.ENV_IMAGE: "registry.example/prep@sha256:" + "ab" * 32,
    contract.ENV_ISOLATION: "none",
}


def test_child_output_and_exit_code_pass_through(launch: Launch) -> None:
    result = launch([PY, "-c", "import sys; print('hello from step'); sys.exit(3)"], STEP_ENV)

    assert result.returncode == 3
    assert result.stdout == "hello from step\n"
    assert result.stage("run")["exit_code"] == 3


def test_cpu_step_skips_gpu_stages_and_records_why(launch: Launch) -> None:
    result = launch([PY, "-c", "pass"], STEP_ENV)

    assert result.returncode == 0, result.stderr
    record = result.record
    assert record == result.logged_record  # the file and the stderr line carry the same record
    assert record["schema"] == AUDIT_SCHEMA
    assert (record["tenant"], record["namespace"], record["pipeline"], record["step"]) == (
        "team-a",
        "team-a-ns",
        "fine-tune",
        "prep",
    )
    assert record["image_digest"] == "sha256:" + "ab" * 32
    assert record["gpu_request"] is None and record["isolation"] == "none"
    assert [s["name"] for s in record["stages"]] == [
        "config",
        "shim-claim",
        "identity",
        "verify-inputs",
        "preflight",
        "scrub-before",
        "shim",
        "run",
        "scrub-after",
    ]
    by_name = {s["name"]: s for s in record["stages"]}
    for name in ("preflight", "scrub-before", "shim", "scrub-after"):
        assert by_name[name]["status"] == "skipped"
        assert "isolation none" in by_name[name]["reason"]
    assert by_name["identity"]["status"] == "skipped"
    assert by_name["run"]["status"] == "ok"
    assert all(s["seconds"] >= 0 for s in record["stages"])
    assert record["exit_code"] == 0 and record["child_exit_code"] == 0
    assert record["started_at"] <= record["ended_at"]
    assert Path(record["audit_file"]).is_file()


def test_each_run_gets_its_own_audit_file(launch: Launch) -> None:
    launch([PY, "-c", "pass"], STEP_ENV)
    result = launch([PY, "-c", "pass"], STEP_ENV)

    files = sorted(result.audit_dir.iterdir())
    assert len(files) == 2
    assert len({json.loads(f.read_text())["run_id"] for f in files}) == 2


def test_config_error_fails_closed_before_the_command_runs(launch: Launch, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {**STEP_ENV, contract.ENV_SCRUB_VERIFY: "thorough"}
    result = launch([PY, "-c", f"open({str(marker)!r}, 'w')"], env)

    assert result.returncode == ExitCode.CONFIG
    assert not marker.exists()
    assert contract.ENV_SCRUB_VERIFY in result.stderr
    assert result.stage("config")["status"] == "failed"
    assert result.record["exit_code"] == ExitCode.CONFIG


def test_gpu_request_without_isolation_is_a_config_error(launch: Launch) -> None:
    env = {
        **STEP_ENV,
        contract.ENV_ISOLATION: "",
        contract.ENV_GPU_REQUEST: '{"kind":"mig","profile":"1g.10gb","count":1}',
    }
    result = launch([PY, "-c", "pass"], env)

    assert result.returncode == ExitCode.CONFIG
    assert contract.ENV_ISOLATION in result.stage("config")["error"]


def test_required_identity_without_socket_fails_closed(launch: Launch, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {
        **STEP_ENV,
        contract.ENV_IDENTITY_REQUIRED: "true",
        contract.ENV_EXPECTED_SPIFFE_ID: "spiffe://acme.example/ns/team-a/pipeline/fine-tune/step/prep",
    }
    result = launch([PY, "-c", f"open({str(marker)!r}, 'w')"], env)

    assert result.returncode == ExitCode.IDENTITY
    assert not marker.exists()
    assert contract.SPIFFE_SOCKET_ENV in result.stage("identity")["error"]
    assert result.stage("run")["status"] == "skipped"


def test_optional_identity_failure_warns_and_the_step_runs(launch: Launch, tmp_path: Path) -> None:
    env = {
        **STEP_ENV,
        contract.ENV_IDENTITY_REQUIRED: "false",
        contract.ENV_EXPECTED_SPIFFE_ID: "spiffe://acme.example/ns/team-a/pipeline/fine-tune/step/prep",
        contract.SPIFFE_SOCKET_ENV: f"unix://{tmp_path}/absent.sock",
    }
    result = launch([PY, "-c", "pass"], env)

    assert result.returncode == 0
    assert result.stage("identity")["status"] == "warning"
    assert "absent.sock" in result.stage("identity")["error"]
    assert result.stage("run")["status"] == "ok"


def test_missing_command_is_127_and_recorded(launch: Launch, tmp_path: Path) -> None:
    result = launch([str(tmp_path / "no-such-program")], STEP_ENV)

    assert result.returncode == ExitCode.NOT_FOUND
    assert result.stage("run")["status"] == "failed"
    assert "no-such-program" in result.stage("run")["error"]


def test_no_command_is_a_usage_error() -> None:
    proc = subprocess.run(
        [PY, "-m", contract.LAUNCHER_MODULE, "--"],
        env=launcher_env({}),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == ExitCode.USAGE
    assert "usage" in proc.stderr


def test_unwritable_audit_dir_fails_the_step(launch: Launch, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**STEP_ENV, contract.ENV_AUDIT_DIR: str(blocker / "audit")}
    result = launch([PY, "-c", "pass"], env)

    assert result.returncode == ExitCode.AUDIT
    record = result.logged_record  # stderr still carries the record
    assert record["exit_code"] == ExitCode.AUDIT and record["child_exit_code"] == 0
    assert contract.ENV_AUDIT_DIR in record["audit_error"]


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", contract.LAUNCHER_MODULE, "--", *command],
        env=launcher_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_sigterm_is_forwarded_and_the_childs_exit_code_kept(tmp_path: Path) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = (
        "import signal, sys, time, pathlib\n"
        "def on_term(signum, frame):\n"
        f"    pathlib.Path({str(got)!r}).write_text(str(signum)); sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        f"pathlib.Path({str(ready)!r}).write_text('')\n"
        "time.sleep(60)\n"
    )
    proc = _start([PY, "-c", child], {**STEP_ENV, contract.ENV_AUDIT_DIR: str(tmp_path / "audit")})
    _wait_for(ready)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)

    assert proc.returncode == 5, stderr
    assert got.read_text() == str(int(signal.SIGTERM))


def test_child_killed_by_signal_exits_128_plus_signal(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    child = f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text(''); time.sleep(60)"
    proc = _start([PY, "-c", child], {**STEP_ENV, contract.ENV_AUDIT_DIR: str(tmp_path / "audit")})
    _wait_for(ready)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)

    assert proc.returncode == 128 + signal.SIGINT
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith(contract.AUDIT_LINE_PREFIX)]
    run = [
        s
        for s in json.loads(line.removeprefix(contract.AUDIT_LINE_PREFIX))["stages"]
        if s["name"] == "run"
    ]
    assert run[0]["signal"] == "SIGINT"


def test_launcher_start_does_not_import_heavy_libraries(tmp_path: Path) -> None:
    env = launcher_env({**STEP_ENV, contract.ENV_AUDIT_DIR: str(tmp_path / "audit")})
    proc = subprocess.run(
        [PY, "-X", "importtime", "-m", contract.LAUNCHER_MODULE, "--", PY, "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "secureml" in imported  # the probe sees the launcher's own imports
    assert not imported & set(HEAVY)


HEAVY = ("kfp", "grpc", "sigstore", "spiffe", "pynvml", "pydantic", "yaml", "cel")


def test_reading_a_gpu_request_imports_nothing_heavy() -> None:
    """The launcher decodes each kind of GPU request with the SDK's own value type
    (secureml.gpu.request) without pulling in kfp, pydantic or grpc, nor the MIG catalogue."""
    code = (
        "import sys\n"
        "from secureml.enforcement import launch\n"
        "from secureml.enforcement.config import load_config\n"
        "for isolation, request in [\n"
        '    (\'mig\', \'{"kind":"mig","profile":"1g.10gb","count":1}\'),\n'
        '    (\'timeslice-shim\', \'{"kind":"timeslice","memory":8589934592,"compute":25}\'),\n'
        '    (\'dedicated\', \'{"kind":"whole","count":2,"product":null}\'),\n'
        "]:\n"
        "    config = load_config({'SECUREML_ISOLATION': isolation, 'SECUREML_GPU_REQUEST': request})\n"
        "    assert config.gpu_request is not None and config.gpu_request.to_json() == request\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(proc.stdout.split())
    assert "secureml.gpu.request" in loaded
    assert not {name.split(".")[0] for name in loaded} & set(HEAVY)
    assert not loaded & {
        "secureml.nvidia.catalogue",
        "secureml.profile.model",
        "secureml.gpu.placement",
        "tempfile",
    }
