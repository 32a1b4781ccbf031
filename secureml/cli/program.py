"""`secureml` as a program (the console script and `python -m secureml`): run the app, then exit.

Python's own exit frees every object and module before the process ends, which is work nobody
sees: after a compile it took about a quarter of the process's CPU time (the CEL programs, kfp's
and pydantic's objects, the kept verdicts). The commands in `FAST_EXIT` have done everything by
the time they return (their files are written and closed in `with` blocks; they start no
threads), so after one of them the program runs the `atexit` handlers, flushes stdout and stderr
and ends with `os._exit`, as mypy does by default (its `fast_exit`). The others (`run`, `image`,
`doctor`: subprocesses, kfp.local, builders, a cluster) exit as Python does. The app called as a
function (a test's `CliRunner`, another program) exits as it always did.

The same commands start with the cycle collector off: importing kfp, the kubernetes client,
pydantic and the CEL engines makes objects that live as long as the process, and the collector's
passes over them (about 250 in a 10-step compile, 50 ms of CPU) freed nothing. Where a command
does make cyclic garbage it turns the collector on (`compile` while kfp builds the pipeline);
`check-pod` keeps it off while it reads and judges (`secureml.admission.gcpause`).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

# Commands (first arguments) that start with the collector off and after which nothing is left to
# do but free memory.
FAST_EXIT = frozenset(
    {"compile", "check-pod", "profile", "verify-image", "verify-bundle", "verify-pipeline"}
)


def main() -> None:
    fast = len(sys.argv) > 1 and sys.argv[1] in FAST_EXIT
    if fast:
        gc.disable()
    from secureml.cli.app import app

    try:
        app()
        code: str | int | None = 0
    except SystemExit as done:
        code = done.code
    if fast:
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
