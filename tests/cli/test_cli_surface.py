"""What a person reads from the CLI: help at 80 columns, the command order, --version, the exit
codes stated in every --help, and no message that names a flag its command does not have."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from secureml.cli import app

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "team-a.yaml"
PIPELINE = REPO / "pipelines" / "secure_finetune.py"
IMAGE = "ghcr.io/acme/train@sha256:" + "a" * 64
runner = CliRunner()
# A flag named in prose: `--name`, not inside `backticks` (another tool's command line).
FLAG = re.compile(r"(?<![\w`/=-])--[a-z][a-z0-9-]*[a-z0-9]")


def commands() -> Iterator[tuple[list[str], Any]]:
    """Every leaf command (typer's vendored click) with its path, e.g. (["profile", "validate"], cmd)."""

    def walk(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, [*path, name])
            else:
                yield [*path, name], command

    return walk(typer.main.get_command(app), [])


COMMANDS = {" ".join(path): command for path, command in commands()}


def flags_of(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if param.param_type_name != "option":
            continue
        for opt in [*param.opts, *param.secondary_opts]:
            names.add(opt)
    return names


def named_flags(text: str) -> set[str]:
    return set(FLAG.findall(re.sub(r"`[^`]*`", "", text)))


def help_text(path: str) -> str:
    result = runner.invoke(app, [*path.split(), "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def test_commands_in_the_order_a_user_meets_them() -> None:
    listing = help_text("").split("Commands:")[1].split("\n\n")[0]
    names = [
        line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line[2] != " "
    ]
    assert names == [
        "compile",
        "run",
        "image",
        "profile",
        "check-pod",
        "verify-image",
        "verify-bundle",
        "verify-pipeline",
        "doctor",
    ]
    profile = help_text("profile").split("Commands:")[1]
    names = [
        line.split()[0] for line in profile.splitlines() if line.startswith("  ") and line[2] != " "
    ]
    assert names == ["schema", "validate", "explain", "render", "diff", "apply", "verify"]


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"secureml \d+\.\d+\.\d+\S*\n", result.output)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_is_readable_at_80_columns(path: str) -> None:
    text = help_text(path)
    assert "<bool>" not in text
    for flag in flags_of(COMMANDS[path]):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{flag} cut or missing"
    too_long = [line for line in text.splitlines() if len(line) > 80 and " " in line.strip()]
    assert not too_long, too_long


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_states_the_exit_codes(path: str) -> None:
    text = " ".join(help_text(path).split())
    assert "Exit 0" in text, text
    if path != "profile schema":
        no_verdict = {"profile validate", "profile explain", "profile render", "image sbom"} | {
            p for p in COMMANDS if p.startswith("image build")
        }
        assert re.search(r"\b1: ", text) or path in no_verdict
        assert re.search(r"\b2: ", text), text


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_flag_in_a_commands_source_text_exists_on_it(path: str) -> None:
    """The strings of the command function (its help and its own error messages)."""
    command = COMMANDS[path]
    assert command.callback is not None
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(command.callback)))
    texts = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    unknown = named_flags("\n".join(texts)) - flags_of(command)
    assert not unknown, f"{path} names {sorted(unknown)}"


ERRORS = [
    (["profile", "verify", str(PROFILE)], "no trusted signer given"),
    (["verify-image", IMAGE, "--bundle", str(PROFILE)], "no trusted signer given"),
    (["verify-bundle", str(PROFILE), "--bundle", str(PROFILE)], "no trusted signer given"),
    (
        [
            "compile",
            str(PIPELINE),
            "--profile",
            str(PROFILE),
            "-o",
            "/tmp/x.yaml",
            "--require-signed-profile",
        ],
        "no trusted signer given",
    ),  # fmt: skip
    (["verify-image", IMAGE, "--profile", str(PROFILE)], "exactly one of --bundle"),
    (["verify-image", "a b", "--fetch", "--profile", str(PROFILE)], "contains whitespace"),
    (["check-pod", "-", "--level", "baseline", "--namespace", "x"], "need --server"),
    (["check-pod", "-"], "exactly one of --profile or --level"),
    (["check-pod", "-", "--server", "--level", "baseline"], "do not apply"),
    (["run", str(PIPELINE), "--profile", str(PROFILE)], "add --local"),
]


@pytest.mark.parametrize(
    ("args", "expected"), ERRORS, ids=[" ".join(a[:1]) + f"-{i}" for i, (a, _) in enumerate(ERRORS)]
)
def test_errors_name_only_flags_the_command_has(args: list[str], expected: str) -> None:
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    command = COMMANDS[" ".join(a for a in args[:2] if a in {"profile", "verify"} or a == args[0])]
    unknown = named_flags(result.output) - flags_of(command)
    assert not unknown, f"{args[0]} error names {sorted(unknown)}: {result.output}"


def readme_commands() -> set[str]:
    """The commands README.md's command table names: `secureml image build\\|check` is two."""
    found: set[str] = set()
    groups = {path.split()[0] for path in COMMANDS if " " in path}
    for line in (REPO / "README.md").read_text().splitlines():
        match = re.match(r"\| `secureml ([^`]*)`", line)
        if not match:
            continue
        words = match.group(1).replace("\\|", "|").split()
        if words[0] in groups:
            found |= {f"{words[0]} {name}" for name in words[1].split("|")}
        else:
            found.add(words[0])
    return found


def test_the_readme_lists_every_command_and_no_other() -> None:
    assert readme_commands() == set(COMMANDS)
