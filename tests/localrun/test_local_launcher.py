"""`secureml run --local` runs the in-venv launcher, also where the profile injects the platform's
(issue 10, class 9): the compiled command's injected prefix is replaced before kfp.local runs it."""

from __future__ import annotations

from secureml.core import contract
from secureml.localrun.runner import LocalStep

STEP = ["sh", "-c", "python3 -m kfp.dsl.executor_main"]


def _step(command: list[str]) -> LocalStep:
    return LocalStep("exec-train", ["train"], {"command": command, "args": []}, {})


def test_injected_launcher_becomes_the_in_venv_one() -> None:
    step = _step([*contract.RUNTIME_LAUNCHER_PREFIX, *STEP])
    assert step.under_launcher and step.lightweight_python
    step.use_local_launcher()
    assert step.container["command"] == [*contract.LAUNCHER_PREFIX, *STEP]
    step.use_local_launcher()  # idempotent
    assert step.container["command"] == [*contract.LAUNCHER_PREFIX, *STEP]


def test_no_launcher_is_still_refused() -> None:
    step = _step(STEP)
    assert not step.under_launcher
    step.use_local_launcher()
    assert step.container["command"] == STEP
