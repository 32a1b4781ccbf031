"""Where a command may write: one rule for every command's output option, never onto an input."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from secureml.core.errors import InputError


def check_output(path: Path, flag: str, inputs: Iterable[Path]) -> None:
    """Raise `InputError` unless `path` can be written as the output file of option `flag`."""
    if path.is_dir():
        raise InputError(
            f"{flag} {path} is a directory",
            why=f"{flag} names the file to write (a missing folder on its way is created)",
            fix=f"give a file name, e.g. {flag} {path / 'pipeline.yaml'}",
        )
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise InputError(
                    f"{flag} {path}: {folder} is a file, not a folder",
                    why=f"{flag} names a file inside folders, which are created where missing",
                    fix="write somewhere else, or move that file away",
                )
            break
    if not path.exists():
        return
    for source in inputs:
        if source.exists() and os.path.samefile(path, source):
            raise InputError(
                f"{flag} {path} is the input {source}",
                why="writing there would overwrite a file this command reads",
                fix=f"write the output to another file, e.g. {flag} {path.with_suffix('.out.yaml')}",
            )


def check_output_folder(path: Path, flag: str) -> None:
    """Raise `InputError` unless `path` can be the output folder of option `flag` (it is one, or
    it is missing and will be created)."""
    if path.exists() and not path.is_dir():
        raise InputError(
            f"{flag} {path} is a file",
            why=f"{flag} names the folder to write into (created if missing)",
            fix=f"give a folder, e.g. {flag} {path.parent / 'deploy'}",
        )


# Characters encoded and written at a time by `save_text`.
_SLICE = 1 << 16


def save_text(path: str | Path, text: str) -> None:
    """`Path(path).write_text(text, encoding="utf-8")`, encoding and writing `_SLICE` characters
    at a time: `write_text` encodes the whole text into one bytes object first, a second copy of
    it held while it is written (a 500-step pipeline's YAML is 1.8 MB, and its write was the
    compile's peak of memory)."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for start in range(0, len(text), _SLICE):
            handle.write(text[start : start + _SLICE])


def write_text(path: Path, text: str, flag: str) -> None:
    """Write an output file; an OS refusal (permissions, full disk) is unusable input, not a crash."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_text(path, text)
    except OSError as err:
        raise InputError(
            f"cannot write {flag} {path}",
            why=err.strerror or str(err),
            fix="choose a writable location",
        ) from None
