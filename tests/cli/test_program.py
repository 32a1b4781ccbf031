"""`secureml` as a program (`secureml.cli.program`): every command gives its whole output, the
files it writes and its exit code, and exits as Python does (atexit handlers and the teardown)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.processes import run_source

# Runs the program as the console script does, after registering an atexit handler and an object
# whose finaliser speaks only if Python's own teardown runs.
PROBE = """
import atexit, sys
atexit.register(lambda: print("ATEXIT", file=sys.stderr))
class Noted:
    def __del__(self):
        print("TEARDOWN", file=sys.stderr)
noted = Noted()
sys.argv = ["secureml", *sys.argv[1:]]
from secureml.cli.program import main
main()
"""


def program(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_source(PROBE, *argv)


def test_a_compile_writes_everything_and_exits_as_python_does(tmp_path: Path) -> None:
    output, report = tmp_path / "p.yaml", tmp_path / "r.json"
    done = program(
        "compile",
        "pipelines/secure_finetune.py",
        "--profile",
        "examples/profiles/team-a-dev.yaml",
        "-o",
        str(output),
        "--report",
        str(report),
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "compliant"  # the whole JSON document, flushed
    assert output.read_text().startswith("# PIPELINE DEFINITION")
    assert json.loads(report.read_text())["result"] == "compliant"
    assert "ATEXIT" in done.stderr
    assert "TEARDOWN" in done.stderr


def test_exit_codes_of_violations_and_of_unusable_input(tmp_path: Path) -> None:
    violating = program(
        "compile",
        "examples/rule_breaker.py",
        "--profile",
        "examples/profiles/team-a-dev.yaml",
        "-o",
        str(tmp_path / "p.yaml"),
    )
    assert violating.returncode == 1, violating.stderr
    assert not (tmp_path / "p.yaml").exists()
    unusable = program("check-pod", str(tmp_path / "missing.yaml"), "--level", "restricted")
    assert unusable.returncode == 2
    assert "missing.yaml" in unusable.stderr and "ATEXIT" in unusable.stderr


def test_other_commands_exit_as_python_does() -> None:
    done = program("run", "--help")
    assert done.returncode == 0 and "Usage: secureml run" in done.stdout
    assert "ATEXIT" in done.stderr and "TEARDOWN" in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "validate", "profiles/team-a.yaml", "profiles/team-conf.yaml"],
        ["profile", "schema"],
        ["check-pod", "tests/rules/allowed/team-a-cpu.yaml", "--profile", "profiles/team-a.yaml"],
        [
            "check-pod",
            "tests/rules/allowed/team-a-mig.yaml",
            "--level",
            "restricted",
            "--format",
            "json",
        ],
    ],
    ids=["validate", "schema", "check-pod", "check-pod-json"],
)
def test_the_program_prints_what_the_app_prints(argv: list[str]) -> None:
    """The whole of a long output (the JSON Schema is about 60 KB) reaches a pipe."""
    from typer.testing import CliRunner

    from secureml.cli import app

    expected = CliRunner().invoke(app, argv)
    done = program(*argv)
    assert done.returncode == expected.exit_code
    assert done.stdout == expected.stdout


def test_a_rendered_bundle_is_written_whole(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secureml.cli import app

    argv = ["profile", "render", "profiles/team-a.yaml", "-o"]
    assert CliRunner().invoke(app, [*argv, str(tmp_path / "app")]).exit_code == 0
    assert program(*argv, str(tmp_path / "program")).returncode == 0
    written = {
        p.relative_to(tmp_path / "app"): p.read_bytes()
        for p in (tmp_path / "app").rglob("*")
        if p.is_file()
    }
    assert written
    assert {
        p.relative_to(tmp_path / "program"): p.read_bytes()
        for p in (tmp_path / "program").rglob("*")
        if p.is_file()
    } == written
