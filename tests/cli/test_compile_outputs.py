"""`secureml compile -o/--report`: a clear error (exit 2, no traceback, nothing written) for a
missing folder, a directory, or any input file (same inode); never an overwritten input."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import InputError
from secureml.core.output_paths import check_output

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    pipeline = tmp_path / "secure_finetune.py"
    profile = tmp_path / "team-a-dev.yaml"
    shutil.copy(REPO / "pipelines" / "secure_finetune.py", pipeline)
    shutil.copy(REPO / "examples" / "profiles" / "team-a-dev.yaml", profile)
    return pipeline, profile


def compile_to(inputs: tuple[Path, Path], *extra: str) -> tuple[int, str]:
    pipeline, profile = inputs
    before = {p: p.read_bytes() for p in inputs}
    result = runner.invoke(app, ["compile", str(pipeline), "--profile", str(profile), *extra])
    assert "Traceback" not in result.output
    assert {p: p.read_bytes() for p in inputs} == before, "an input was overwritten"
    return result.exit_code, result.output


def test_missing_folders_are_created_and_a_path_of_the_other_kind_refused(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    code, output = compile_to(
        inputs,
        *("-o", str(tmp_path / "no" / "such" / "p.yaml")),
        *("--report", str(tmp_path / "x" / "r.json")),
    )
    assert code == 0, output
    assert (tmp_path / "no" / "such" / "p.yaml").is_file()
    assert (tmp_path / "x" / "r.json").is_file()
    code, output = compile_to(inputs, "-o", str(tmp_path))
    assert code == 2 and "is a directory" in output
    (tmp_path / "afile").write_text("")
    code, output = compile_to(inputs, "-o", str(tmp_path / "afile" / "p.yaml"))
    assert code == 2 and "is a file, not a folder" in output


def test_render_takes_a_folder_by_the_same_rule(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secureml.cli import app

    profile = str(Path(__file__).resolve().parents[2] / "profiles" / "team-a.yaml")
    made = CliRunner().invoke(app, ["profile", "render", profile, "-o", str(tmp_path / "a" / "b")])
    assert made.exit_code == 0 and (tmp_path / "a" / "b" / "team-a").is_dir(), made.output
    (tmp_path / "afile").write_text("")
    refused = CliRunner().invoke(app, ["profile", "render", profile, "-o", str(tmp_path / "afile")])
    assert refused.exit_code == 2 and "-o " in refused.output and "is a file" in refused.output
    assert "Errno" not in refused.output


@pytest.mark.parametrize("which", [0, 1])
def test_output_onto_an_input_is_refused(inputs: tuple[Path, Path], which: int) -> None:
    code, output = compile_to(inputs, "-o", str(inputs[which]))
    assert code == 2 and "is the input" in output


def test_links_to_an_input_are_the_input(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    symlink, hardlink = tmp_path / "sym.yaml", tmp_path / "hard.yaml"
    symlink.symlink_to(inputs[1])
    os.link(inputs[1], hardlink)
    for target in (symlink, hardlink):
        code, output = compile_to(inputs, "-o", str(target))
        assert code == 2 and "is the input" in output
    code, output = compile_to(inputs, "-o", str(tmp_path / "p.yaml"), "--report", str(inputs[0]))
    assert code == 2 and "--report" in output and "is the input" in output


def test_report_and_output_must_differ(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    target = tmp_path / "p.yaml"
    target.write_text("old\n")
    code, output = compile_to(inputs, "-o", str(target), "--report", str(target))
    assert code == 2 and "is the input" in output and target.read_text() == "old\n"


def test_a_good_output_is_written(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    code, output = compile_to(
        inputs, "-o", str(tmp_path / "p.yaml"), "--report", str(tmp_path / "r.json")
    )
    assert code == 0, output
    assert (tmp_path / "p.yaml").is_file() and (tmp_path / "r.json").is_file()


def test_check_output_alone(tmp_path: Path) -> None:
    source = tmp_path / "in.yaml"
    source.write_text("x")
    check_output(tmp_path / "new.yaml", "-o", [source])  # a new file in an existing folder
    with pytest.raises(InputError, match="is the input"):
        check_output(source, "-o", [source])
    check_output(tmp_path / "missing" / "f", "-o", [])  # a missing folder is created
    with pytest.raises(InputError, match="is a file, not a folder"):
        check_output(source / "f", "-o", [])


def test_an_output_is_written_whole_in_slices(tmp_path: Path) -> None:
    """`save_text` encodes a slice at a time (no second copy of a long YAML in memory) and writes
    what `Path.write_text` writes: multi-byte characters across the slices' edges, a shorter text
    over a longer file."""
    from secureml.core.output_paths import _SLICE, save_text

    text = ("é" * (_SLICE - 1) + "\U0001f512x") * 3 + "\n"
    path = tmp_path / "out.yaml"
    path.write_text("y" * (5 * _SLICE))
    save_text(path, text)
    assert path.read_bytes() == text.encode("utf-8")
    save_text(path, "")
    assert path.read_bytes() == b""
