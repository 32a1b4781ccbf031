"""`app()` builds only the command or group its first argument names: the same help, errors and
exit codes as the whole app, and the whole app for anything else."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main

from secureml.cli import app
from secureml.cli.app import ORDER, _named


def _run(callable_: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    try:
        code = callable_(args=argv, prog_name="secureml", standalone_mode=False)
    except typer.Exit as done:
        code = done.exit_code
    except Exception as err:  # noqa: BLE001 - click's usage errors: compare their text
        code = f"{type(err).__name__}: {err}"
    captured = capsys.readouterr()
    return code, captured.out + captured.err


ARGVS = [
    *([name, "--help"] for name in ORDER),
    ["check-pod", "--nope"],
    ["check-pod"],
    ["profile", "render", "--help"],
    ["doctor"],
]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_a_named_command_behaves_as_in_the_whole_app(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _run(typer.main.get_command(app), argv, capsys)
    assert _run(app, argv, capsys) == whole


@pytest.mark.parametrize("first", ORDER)
def test_only_the_named_command_is_built(first: str) -> None:
    narrowed = _named(app, first)
    assert narrowed is not None
    built = typer.main.get_command(narrowed)
    assert list(built.commands) == [first]  # type: ignore[attr-defined]


@pytest.mark.parametrize("first", ["--version", "chek-pod", "--help"])
def test_anything_else_gets_the_whole_app(first: str) -> None:
    assert _named(app, first) is None
