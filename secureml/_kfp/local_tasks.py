"""Per-run env for kfp.local's tasks: the one seam `secureml run --local` needs in kfp.local.

No public hook exists (docs/upstream/kfp-local-task-env.md); tests/localrun/test_parallel_for.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# (the task's output folder, its env to update in place)
TaskHook = Callable[[Path, dict[str, str]], None]


def task_folder(full_command: list[str]) -> Path | None:
    """The task's output folder, from the executor input in its command; None if there is none."""
    for index, part in enumerate(full_command[:-1]):
        if part == "--executor_input":
            try:
                executor_input = json.loads(full_command[index + 1])
            except json.JSONDecodeError:
                return None
            output_file = executor_input.get("outputs", {}).get("outputFile")
            return Path(output_file).parent if output_file else None
    return None


@contextlib.contextmanager
def per_task_env(hook: TaskHook) -> Iterator[None]:
    """While active, `hook(folder, env)` runs before each kfp.local subprocess task starts."""
    from kfp.local import subprocess_task_handler as module

    original = module.SubprocessTaskHandler

    class _Handler(original):  # type: ignore[misc, valid-type]
        def __init__(
            self,
            image: str,
            full_command: list[str],
            pipeline_root: str,
            runner: Any,
            env_vars: dict[str, str] | None = None,
        ) -> None:
            env = dict(env_vars or {})
            folder = task_folder(full_command)
            if folder is not None:
                hook(folder, env)
            super().__init__(image, full_command, pipeline_root, runner, env)

    module.SubprocessTaskHandler = _Handler
    try:
        yield
    finally:
        module.SubprocessTaskHandler = original
