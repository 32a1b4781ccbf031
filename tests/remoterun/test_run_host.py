"""`secureml run --host` through the real kfp.Client against the KFP API stand-in
(tests/remoterun/kfp_api_server.py): exit codes, progress, refusals named by rule, audit records."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from tests.remoterun.kfp_api_server import KfpApiServer
from tests.support.json_schemas import check

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "pipelines" / "secure_finetune.py"
PROFILE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
STEPS = ["prep", "train", "evaluate"]


def run(url: str, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app,
        ["run", str(PIPELINE), "--profile", str(PROFILE), "--host", url, "--poll", "0.01", *extra],
    )
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


def test_a_run_that_succeeds_shows_each_state_and_every_audit_record() -> None:
    with KfpApiServer() as server:
        code, out, err = run(server.url)
        (created,) = server.runs.values()
    assert code == 0, err
    assert created.body.service_account == "secureml-pipeline-runner"
    assert [s.name for s in created.steps] == STEPS
    for step in STEPS:  # plain progress lines in a pipe, in the order they changed
        assert f"step {step}: new -> PENDING" in out
        assert f"step {step}: RUNNING -> SUCCEEDED" in out
    assert out.index("step prep: RUNNING -> SUCCEEDED") < out.index("step train: new -> PENDING")
    assert f"logs: {server.url}/#/runs/details/{created.run_id}" in out
    assert "3 of 3 step(s) passed." in out
    assert "no audit record read" not in out


def test_json_summary_satisfies_its_schema() -> None:
    with KfpApiServer() as server:
        code, out, err = run(server.url, "--format", "json", "--experiment", "smoke")
        (experiment,) = server.experiments.values()
    assert code == 0, err
    document = json.loads(out)
    check("run-remote", document)
    assert document["succeeded"] is True and document["state"] == "SUCCEEDED"
    assert sorted(s["step"] for s in document["steps"]) == sorted(STEPS)
    assert document["tasks"] == dict.fromkeys(STEPS, "SUCCEEDED")
    assert experiment.display_name == "smoke"
    assert "step prep: new -> PENDING" in err  # progress goes to stderr beside the document


def test_a_step_refused_at_admission_is_a_violation_with_our_rule() -> None:
    with KfpApiServer(script="refuse", refused_step=1) as server:
        code, out, err = run(server.url, "--format", "json")
    assert code == 1
    document = json.loads(out)
    check("run-remote", document)
    assert document["state"] == "FAILED"
    assert document["violations"] == [
        {
            "step": "train",
            "rule": "secureml.forbiddenEnv",
            "what": 'container "main" sets LD_PRELOAD: no container may set it',
        }
    ]
    assert "step train refused at admission: [secureml.forbiddenEnv]" in err
    assert document["stepsWithoutRecord"]["train"].startswith("the step pod never ran")
    assert [s["step"] for s in document["steps"]] == ["prep"]


def test_a_step_pending_on_a_refusal_is_reported_not_waited_for() -> None:
    with KfpApiServer(script="pending-refused") as server:
        code, _, err = run(server.url, "--timeout", "600")
        (created,) = server.runs.values()
    assert code == 1
    assert "step prep refused at admission: [secureml.forbiddenEnv]" in err
    assert created.tick < 10  # reported at once, not after the timeout


def test_a_stuck_step_times_out_with_a_clear_message() -> None:
    with KfpApiServer(script="stuck") as server:
        code, _, err = run(server.url, "--timeout", "1", "--poll", "0.05")
    assert code == 1
    assert "did not end within --timeout 1 s" in err
    assert "prep PENDING" in err
    assert "it goes on in KFP" in err


def test_a_failed_step_is_exit_1_with_its_record() -> None:
    with KfpApiServer(script="fail") as server:
        code, out, err = run(server.url)
    assert code == 1
    assert "step prep failed: Error (exit code 1)" in err
    assert "FAILED" in out  # the audit table shows the failed record


def test_logs_the_server_does_not_give_are_named() -> None:
    with KfpApiServer(serve_logs=False) as server:
        code, out, _ = run(server.url)
    assert code == 0
    for step in STEPS:
        assert f"no audit record read for {step}: pod log " in out
        assert "500 Could not get main container logs" in out


def test_multi_user_runs_in_the_tenant_namespace() -> None:
    with KfpApiServer(multi_user=True, namespace="team-a") as server:
        code, out, err = run(server.url)
        (experiment,) = server.experiments.values()
    assert code == 0, err
    assert experiment.namespace == "team-a"
    assert "3 of 3 step(s) passed." in out  # the logs read with podnamespace, as KFP requires


def test_multi_user_namespace_the_user_may_not_use_is_exit_2() -> None:
    with KfpApiServer(multi_user=True, namespace="team-b") as server:
        code, _, err = run(server.url)
    assert code == 2
    assert "does not let this client" in err and "PermissionDenied" in err


@pytest.mark.parametrize("url", ["localhost:8080", "ftp://x", "http://", "http://h:99999"])
def test_a_bad_url_is_exit_2(url: str) -> None:
    code, _, err = run(url)
    assert code == 2
    assert f"--host {url!r}" in err


def test_an_unreachable_host_is_exit_2_without_compiling() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the test runs: nothing listens there
    code, _, err = run(f"http://127.0.0.1:{port}")
    assert code == 2
    assert f"cannot reach the KFP server at http://127.0.0.1:{port}" in err
    assert "Connection refused" in err


def test_local_only_flags_are_refused_with_host() -> None:
    code, _, err = run("http://127.0.0.1:1", "--simulate-gpu")
    assert code == 2 and "--simulate-gpu: only for --local runs" in err


def test_arguments_are_sent_as_the_declared_types() -> None:
    with KfpApiServer() as server:
        code, _, err = run(server.url, "--arg", "epochs=3", "--arg", "rows=10")
        (created,) = server.runs.values()
    assert code == 0, err
    assert created.body.runtime_config.parameters == {"epochs": 3, "rows": 10}


@pytest.mark.parametrize(
    ("arg", "message"),
    [("nosuch=1", "'nosuch' is not a parameter"), ("epochs=x", "epochs is declared as int")],
)
def test_bad_arguments_are_exit_2_and_submit_nothing(arg: str, message: str) -> None:
    with KfpApiServer() as server:
        code, _, err = run(server.url, "--arg", arg)
        assert not server.runs
    assert code == 2
    assert message in err


def test_a_terminal_gets_a_live_table() -> None:
    import io

    from secureml.cli.run_host import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    progress = Progress(screen, ["prep", "train"])
    progress.change("prep", None, "RUNNING")
    progress.change("run", None, "RUNNING")
    progress.stop()
    shown = screen.getvalue()
    assert "run: RUNNING" in shown
    assert "prep" in shown and "RUNNING" in shown and "train" in shown
    assert "->" not in shown  # no plain progress lines on a terminal


def test_pod_names_follow_kfp() -> None:
    from secureml.remoterun.follow import pod_name

    workflow = {"metadata": {"name": "p-abc12"}}
    node = {"id": "p-abc12-1234", "name": "p-abc12.root.train.executor"}
    assert pod_name(workflow, {**node, "templateName": "system-container-impl"}) == (
        "p-abc12-system-container-impl-1234"
    )
    assert pod_name(workflow, {**node, "name": "p-abc12.inline"}) == "p-abc12-1234"
    assert pod_name({"metadata": {"name": "p-abc12"}}, {"id": "x", "name": "p-abc12"}) == "p-abc12"
    v1 = {"metadata": {"name": "p", "annotations": {"workflows.argoproj.io/pod-name-format": "v1"}}}
    assert pod_name(v1, node) == "p-abc12-1234"


def test_a_server_that_stops_answering_is_exit_2_not_a_hang() -> None:
    import time

    with KfpApiServer(hang_after=2) as server:
        started = time.monotonic()
        code, _, err = run(server.url, "--timeout", "2")
        seconds = time.monotonic() - started
    assert code == 2
    assert f"cannot read the run: the KFP server at {server.url} stopped answering" in err
    assert seconds < 25  # the compile, then urllib3's retries of one 2 s request


def test_a_pipeline_that_breaks_the_profile_is_exit_1_and_not_submitted() -> None:
    with KfpApiServer() as server:
        result = CliRunner().invoke(
            app,
            ["run", str(REPO / "examples" / "rule_breaker.py"), "--profile", str(PROFILE)]
            + ["--host", server.url],
        )
        assert not server.runs
    assert result.exit_code == 1, result.output
    assert "error: not submitted: the pipeline breaks the profile's rules" in result.stderr
