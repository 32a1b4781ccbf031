"""Where kfp.local's own output goes during `secureml run --local`: `DIR/run.log`."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # kfp.local colours task names and statuses
LOG_FILE = "run.log"


class _Sink(io.TextIOBase):
    """A text stream writing to the log file and, when given, to a console."""

    def __init__(self, log: TextIO, console: TextIO | None) -> None:
        self._log = log
        self._console = console
        self._colour = console is not None and console.isatty()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        plain = ANSI.sub("", text)
        self._log.write(plain)
        if self._console is not None:
            self._console.write(text if self._colour else plain)
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        if self._console is not None:
            self._console.flush()


@contextlib.contextmanager
def captured_output(path: Path, *, verbose: bool) -> Iterator[None]:
    """Send this process's stdout (kfp.local's logs and its tasks' output) to `path`, and to the
    terminal too when `verbose`. The root logger writes there too while the run lasts: kfp.local
    also logs outside its own logger setup (its workspace clean-up), which would otherwise reach
    whatever handler the root logger had, or none."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with path.open("w", encoding="utf-8") as log:
        sink = _Sink(log, sys.stdout if verbose else None)
        handler = logging.StreamHandler(sink)
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(sink):
                yield
        finally:
            root.handlers = handlers
            root.setLevel(level)
            sink.flush()


def tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a run log, without the launcher's one-line audit JSON."""
    if not path.exists():
        return []
    kept = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("secureml-audit:")
    ]
    return kept[-lines:]
