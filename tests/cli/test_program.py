"""`secureml` as a program (`secureml.cli.program`): the commands in FAST_EXIT end with
`os._exit` after the atexit handlers and a flush, and still give their whole output, the files
they write and their exit codes; the others exit as Python does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from secureml.cli.program import FAST_EXIT, exit_status
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


def test_a_compile_writes_everything_and_skips_only_the_teardown(tmp_path: Path) -> None:
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
    assert "TEARDOWN" not in done.stderr


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
    assert "run" not in FAST_EXIT and "doctor" not in FAST_EXIT and "image" not in FAST_EXIT
    done = program("run", "--help")
    assert done.returncode == 0 and "Usage: secureml run" in done.stdout
    assert "ATEXIT" in done.stderr and "TEARDOWN" in done.stderr


@pytest.mark.parametrize(
    ("code", "status", "printed"),
    [(None, 0, ""), (0, 0, ""), (2, 2, ""), (256 + 3, 3, ""), (True, 1, ""), ("bad", 1, "bad\n")],
)
def test_exit_status_is_what_sys_exit_gives(
    code: str | int | None, status: int, printed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(code) == status
    assert capsys.readouterr().err == printed


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


def test_the_collector_is_off_at_start_and_on_while_kfp_builds(tmp_path: Path) -> None:
    """What start-up loads stays loaded; the compile (kfp's build of a long pipeline leaves
    cyclic garbage) runs with the collector on, and leaves it as it found it."""
    import gc

    from secureml.cli import compile as compile_module

    probe = (
        "import gc, sys; sys.argv = ['secureml', *sys.argv[1:]]\n"
        "import secureml.cli.compile as c\n"
        "frozen = c._heap_frozen\n"
        "def noted():\n"
        "    print('AT START', gc.isenabled(), file=sys.stderr)\n"
        "    context = frozen()\n"
        "    class Noting:\n"
        "        def __enter__(self):\n"
        "            context.__enter__(); print('COMPILING', gc.isenabled(), file=sys.stderr)\n"
        "        def __exit__(self, *exc):\n"
        "            return context.__exit__(*exc)\n"
        "    return Noting()\n"
        "c._heap_frozen = noted\n"
        "from secureml.cli.program import main\n"
        "main()\n"
    )
    done = run_source(
        probe,
        "compile",
        "pipelines/secure_finetune.py",
        "--profile",
        "examples/profiles/team-a-dev.yaml",
        "-o",
        str(tmp_path / "p.yaml"),
    )
    assert done.returncode == 0, done.stderr
    assert "AT START False" in done.stderr and "COMPILING True" in done.stderr
    was = gc.isenabled()
    for start in (False, True):
        (gc.disable if not start else gc.enable)()
        with compile_module._heap_frozen():
            assert gc.isenabled()
        assert gc.isenabled() is start
    (gc.enable if was else gc.disable)()
