"""`secureml run --local`: unusable input and unrunnable steps are refused before a run folder
exists; kfp.local's own output goes to the run log unless --verbose."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from secureml.compile.pipeline_args import bind_arguments
from secureml.core.errors import InputError, SecuremlError

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = Path(__file__).with_name("pipelines.py")
PROFILE = ROOT / "profiles" / "team-a.yaml"


def _run(out: Path, pipeline: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            pipeline,
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--output-dir",
            str(out),
            *extra,
        ],
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arg", "lr=0.1", "--arg", "tags=[1]", "--arg", "foo=1"], "'foo' is not a parameter"),
        (["--arg", "tags=[1]"], "required parameter 'lr' has no value"),
        (["--arg", "lr=abc", "--arg", "tags=[1]"], "lr='abc': lr is declared as float"),
        (["--arg", "lr=1", "--arg", "tags={}"], "tags='{}': tags is declared as list (JSON)"),
        (["--arg", "lr=1", "--arg", "tags=[]", "--arg", "epochs=1.5"], "epochs is declared as int"),
        (
            ["--arg", "lr=1", "--arg", "tags=[]", "--arg", "verbose=yes"],
            "verbose is declared as bool",
        ),
    ],
)
def test_unusable_arguments_exit_2_and_leave_nothing(tmp_path: Path, args, message) -> None:
    code, output = _run(tmp_path / "out", "typed-args", *args)
    assert code == 2, output
    assert message in output and "Traceback" not in output
    # the first error line (in a whole run of tests/localrun an earlier kfp.local run leaves
    # leading spaces in the captured stream; the message itself is what the user reads)
    first = next(line for line in output.splitlines() if "error:" in line)
    assert first.lstrip().startswith("error: pipeline typed-args: "), output
    assert "lr (float, required)" in output and "epochs (int, default 2)" in output
    assert not (tmp_path / "out").exists()


def test_every_argument_problem_at_once() -> None:
    spec = {
        "root": {
            "inputDefinitions": {
                "parameters": {
                    "lr": {"parameterType": "NUMBER_DOUBLE"},
                    "n": {"parameterType": "NUMBER_INTEGER"},
                }
            }
        }
    }
    with pytest.raises(InputError) as err:
        bind_arguments(spec, {"foo": 1, "lr": "x"}, pipeline="p")
    assert err.value.what == (
        "pipeline p: 'foo' is not a parameter of the pipeline; "
        "lr='x': lr is declared as float, and this is not one; "
        "required parameter 'n' has no value"
    )
    assert bind_arguments(spec, {"lr": "0.5", "n": "3"}, pipeline="p") == {"lr": 0.5, "n": 3}
    assert bind_arguments(spec, {"lr": 2, "n": 3}, pipeline="p") == {"lr": 2, "n": 3}
    with pytest.raises(InputError, match="n is declared as int, not bool"):
        bind_arguments(spec, {"lr": 1.0, "n": True}, pipeline="p")


def test_typed_arguments_reach_the_step(tmp_path: Path) -> None:
    code, output = _run(
        tmp_path / "out",
        "typed-args",
        *("--arg", "lr=0.5", "--arg", "tags=[1, 2]", "--arg", "verbose=true"),
    )
    assert code == 0, output
    assert "scaled  passed  0" in output


def test_a_container_component_is_refused_before_anything_runs(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "out", "with-container")
    assert code == SecuremlError.exit_code, output  # a machine check, like --dev-identity's
    assert "echo-container are container components" in output
    assert "Lightweight Python Components" in output and "Traceback" not in output
    assert not (tmp_path / "out").exists(), "nothing ran, nothing was written"


def test_quiet_by_default_the_log_in_the_run_folder(tmp_path: Path) -> None:
    # a root handler on a closed stream (as an earlier CLI call in this process can leave one):
    # kfp.local's own logging outside its logger setup must still go to the run log
    stale = io.StringIO()
    handler = logging.StreamHandler(stale)
    stale.close()
    logging.getLogger().addHandler(handler)
    try:
        code, output = _run(tmp_path / "out", "numbers", "--arg", "count=3")
    finally:
        logging.getLogger().removeHandler(handler)
    assert "Logging error" not in output and "Cleaned up workspace" not in output
    assert code == 0, output
    assert "Executing task" not in output and "secureml-audit:" not in output
    assert "\x1b[" not in output
    assert "2 of 2 step(s) passed." in output and "make-numbers  passed  0" in output
    assert len(output.splitlines()) < 20
    log = (tmp_path / "out" / "run.log").read_text()
    assert "Executing task 'make-numbers'" in log and "secureml-audit:" in log
    assert "Cleaned up workspace" in log
    assert "\x1b[" not in log


def test_verbose_streams_the_task_logs_without_colour_codes_in_a_pipe(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "out", "numbers", "--arg", "count=3", "--verbose")
    assert code == 0, output
    assert "Executing task 'make-numbers'" in output and "\x1b[" not in output
    assert "2 of 2 step(s) passed." in output


def test_a_failed_run_shows_the_end_of_the_log(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "out", "breaks")
    assert code == 1
    assert f"last lines of {tmp_path / 'out' / 'run.log'}" in output
    assert "Task 'fail-on-purpose' finished with status FAILURE" in output


def test_a_branch_not_taken_is_reported_as_not_run_not_as_a_failure(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "out", "branches", "--simulate-gpu")
    assert code == 0, output
    (line,) = [line for line in output.splitlines() if "not run" in line or "no audit" in line]
    assert line == "not run (on a condition branch that was not taken): scaled"
