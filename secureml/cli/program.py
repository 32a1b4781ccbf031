"""`secureml` as a program (the console script and `python -m secureml`): run the app, then exit.

Python's own exit frees every object and module before the process ends, which is work nobody
sees: after a compile it took about a quarter of the process's CPU time (the CEL programs, kfp's
and pydantic's objects, the kept verdicts). The commands in `FAST_EXIT` have done everything by
the time they return (their files are written and closed in `with` blocks; they start no
threads), so after one of them the program runs the `atexit` handlers, flushes stdout and stderr
and ends with `os._exit`, as mypy does by default (its `fast_exit`). The others (`run`, `image`,
`doctor`: subprocesses, kfp.local, builders, a cluster) exit as Python does. The app called as a
function (a test's `CliRunner`, another program) exits as it always did.
"""

from __future__ import annotations

import atexit
import os
import sys

# Commands (first arguments) after which nothing is left to do but free memory.
FAST_EXIT = frozenset(
    {"compile", "check-pod", "profile", "verify-image", "verify-bundle", "verify-pipeline"}
)


def main() -> None:
    from secureml.cli.app import app

    try:
        app()
        code: str | int | None = 0
    except SystemExit as done:
        code = done.code
    if sys.argv[1:2] and sys.argv[1] in FAST_EXIT:
        atexit._run_exitfuncs()
        status = exit_status(code)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(code)


def exit_status(code: str | int | None) -> int:
    """The status `sys.exit(code)` ends a process with (printing a message code as it does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
