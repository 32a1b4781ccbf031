"""kfp's name sanitiser, remembered for the length of one compile.

kfp 2.17's `build_spec_by_group` recomputes the sanitised name of every task of a DAG once for each
task of that DAG (`tasks_in_current_dag`): n² calls of `kfp.dsl.utils.maybe_rename_for_k8s`, two
regular-expression substitutions each. At 500 steps that is 250,000 calls and most of kfp's build
time, which `secureml compile` pays a second time when it re-traces the pipeline with the controls
(the first trace is the user's `@dsl.pipeline`). The function is pure (a string in, a string out,
nothing else read or written), so remembering its answers changes no output of the build; the
memo lives only inside `remembered_names()` and kfp's own function is put back after.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def remembered_names() -> Iterator[None]:
    """Within the block, `kfp.dsl.utils.maybe_rename_for_k8s` answers each name once."""
    from kfp.dsl import utils

    original = utils.maybe_rename_for_k8s
    utils.maybe_rename_for_k8s = functools.cache(original)
    try:
        yield
    finally:
        utils.maybe_rename_for_k8s = original
