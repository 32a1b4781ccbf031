"""The launcher's identity stage against a real Workload API (secureml.localrun.dev_identity) on a unix socket."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from secureml.localrun.dev_identity import DevWorkloadAPI
from tests.support.workload_api import HangingWorkloadAPI

from .conftest import Launch

EXPECTED = "spiffe://acme.example/ns/team-a/pipeline/fine-tune/step/train"
CHILD_REPORTS_ENV = (
    "import json, os, sys; "
    "names = [k for k in os.environ if k.startswith('SECUREML_SVID_')]; "
    "json.dump({k: [os.environ[k], open(os.environ[k]).read()[:40]] for k in names}, sys.stdout)"
)


def _env(api: DevWorkloadAPI, **extra: str) -> dict[str, str]:
    return {
        contract.ENV_PIPELINE: "fine-tune",
        contract.ENV_STEP: "train",
        contract.ENV_IDENTITY_REQUIRED: "true",
        contract.ENV_EXPECTED_SPIFFE_ID: EXPECTED,
        contract.SPIFFE_SOCKET_ENV: api.endpoint,
        **extra,
    }


def test_right_identity_is_exported_to_the_step(launch: Launch, tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        result = launch(
            [sys.executable, "-c", CHILD_REPORTS_ENV],
            _env(api, **{contract.ENV_IDENTITY_DIR: str(tmp_path / "ids")}),
        )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert set(seen) == {contract.ENV_SVID_CERT, contract.ENV_SVID_KEY, contract.ENV_SVID_BUNDLE}
    assert seen[contract.ENV_SVID_CERT][1].startswith("-----BEGIN CERTIFICATE-----")
    assert seen[contract.ENV_SVID_KEY][1].startswith("-----BEGIN PRIVATE KEY-----")
    assert all(Path(path).parent.parent == tmp_path / "ids" for path, _ in seen.values())
    record = result.record
    assert record["spiffe_id"] == EXPECTED
    assert result.stage("identity")["status"] == "ok"
    assert result.stage("identity")["detail"]["spiffe_id"] == EXPECTED
    assert "PRIVATE KEY" not in json.dumps(record)


def test_wrong_identity_stops_the_step(launch: Launch, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    other = "spiffe://acme.example/ns/team-b/pipeline/fine-tune/step/train"
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=other) as api:
        result = launch([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], _env(api))

    assert result.returncode == ExitCode.IDENTITY
    assert not marker.exists()
    assert other in result.stage("identity")["error"]
    assert "spiffe_id" not in result.record


def test_silent_workload_api_times_out_within_the_bound(launch: Launch, tmp_path: Path) -> None:
    with HangingWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        started = time.monotonic()
        result = launch(
            [sys.executable, "-c", "pass"], _env(api, **{contract.ENV_IDENTITY_TIMEOUT: "1"})
        )
        elapsed = time.monotonic() - started

    assert result.returncode == ExitCode.IDENTITY
    assert "did not answer within 1 s" in result.stage("identity")["error"]
    assert elapsed < 15


def test_signal_before_the_command_starts_stops_the_launcher(tmp_path: Path) -> None:
    import signal
    import subprocess

    from .conftest import launcher_env

    marker = tmp_path / "ran"
    with HangingWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        env = _env(
            api,
            **{
                contract.ENV_IDENTITY_REQUIRED: "false",  # optional: its timeout alone would not stop the step
                contract.ENV_IDENTITY_TIMEOUT: "3",
                contract.ENV_AUDIT_DIR: str(tmp_path / "audit"),
            },
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                contract.LAUNCHER_MODULE,
                "--",
                sys.executable,
                "-c",
                f"open({str(marker)!r}, 'w')",
            ],
            env=launcher_env(env),
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while not api.workloads:  # the launcher is now waiting on the Workload API
            assert time.monotonic() < deadline, "the launcher never called the Workload API"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)

    assert proc.returncode == 128 + signal.SIGTERM
    assert not marker.exists()
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith(contract.AUDIT_LINE_PREFIX)]
    record = json.loads(line.removeprefix(contract.AUDIT_LINE_PREFIX))
    stages = {s["name"]: s for s in record["stages"]}
    assert stages["identity"]["status"] == "warning"
    assert stages["run"] == {
        "name": "run",
        "status": "skipped",
        "reason": "launcher was signalled",
        "seconds": 0.0,
    }
    assert record["child_exit_code"] is None and record["exit_code"] == 128 + signal.SIGTERM
