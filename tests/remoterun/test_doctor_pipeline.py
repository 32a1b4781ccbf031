"""`secureml doctor pipeline` through the real kfp.Client against the KFP API stand-in."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from secureml.cli import app
from tests.remoterun.kfp_api_server import KfpApiServer
from tests.support.json_schemas import check

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "a" * 64


def doctor(url: str, *extra: str, image: str = IMAGE) -> tuple[int, dict[str, object], str]:
    result = CliRunner().invoke(
        app,
        ["doctor", "pipeline", "--host", url, "--profile", str(PROFILE), "--image", image]
        + ["--poll", "0.01", "--format", "json", *extra],
    )
    assert "Traceback" not in result.output, result.output
    document = json.loads(result.stdout) if result.stdout.strip() else {}
    if document:
        check("doctor-pipeline", document)
    return result.exit_code, document, result.stderr


def statuses(document: dict[str, object]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in document["checks"]}  # type: ignore[attr-defined]


def test_every_step_admitted_run_and_audited() -> None:
    with KfpApiServer() as server:
        code, document, err = doctor(server.url)
        (run,) = server.runs.values()
    assert code == 0, err
    assert [s.name for s in run.steps] == ["hello", "check"]
    assert run.body.service_account == "secureml-pipeline-runner"
    assert statuses(document) == {
        "host": "pass",
        "compile": "pass",
        "submit": "pass",
        **{
            f"step.{s}.{c}": "pass"
            for s in ("hello", "check")
            for c in ("admitted", "ran", "audited")
        },
        "run": "pass",
    }


def test_a_refused_step_fails_with_the_rule() -> None:
    with KfpApiServer(script="refuse", refused_step=1) as server:
        code, document, _ = doctor(server.url)
    assert code == 1
    found = statuses(document)
    assert found["step.hello.ran"] == "pass" and found["step.check.admitted"] == "fail"
    (refused,) = [c for c in document["checks"] if c["name"] == "step.check.admitted"]  # type: ignore[attr-defined]
    assert "[secureml.forbiddenEnv]" in refused["seen"]


def test_logs_out_of_reach_warn_and_say_where_to_read_them() -> None:
    with KfpApiServer(serve_logs=False) as server:
        code, document, _ = doctor(server.url)
    assert code == 0
    assert statuses(document)["step.hello.audited"] == "warn"


def test_a_stuck_run_fails_at_the_timeout() -> None:
    with KfpApiServer(script="stuck") as server:
        code, document, _ = doctor(server.url, "--timeout", "1", "--poll", "0.05")
    assert code == 1
    assert statuses(document)["run"] == "fail"


def test_an_image_the_profile_refuses_fails_the_compile_and_submits_nothing() -> None:
    with KfpApiServer() as server:
        code, document, _ = doctor(server.url, image="docker.io/library/python:3.12")
        assert not server.runs
    assert code == 1
    assert statuses(document) == {"host": "pass", "compile": "fail"}


def test_an_unreachable_host_is_exit_2() -> None:
    code, document, err = doctor("http://127.0.0.1:9")
    assert code == 2 and not document
    assert "cannot reach the KFP server" in err
