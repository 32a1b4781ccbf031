"""kfp's name functions, quick for the length of one compile.

kfp 2.17's `build_spec_by_group` recomputes the sanitised name of every task of a DAG once for each
task of that DAG (`tasks_in_current_dag`): n² calls of `kfp.dsl.utils.maybe_rename_for_k8s`, two
regular-expression substitutions each. At 500 steps that is 250,000 calls and most of kfp's build
time, which `secureml compile` pays a second time when it re-traces the pipeline with the controls
(the first trace is the user's `@dsl.pipeline`). The function is pure (a string in, a string out,
nothing else read or written), so remembering its answers changes no output of the build.

kfp's `Pipeline.add_task` names the k-th task of a component by trying `name`, `name-2`, ...
`name-k` against the list of the names taken so far (`make_name_unique_by_adding_index`): each try
scans the list, n³ in all (a chain of 250 `train` steps tries 31,000 names, each against up to 500).
The same tries against a set of those names give the same answer, the first name not taken.

Both replacements live only inside `remembered_names()`; kfp's own functions are put back after.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Collection, Iterator


def unique_name(name: str, collection: Collection[str], delimiter: str) -> str:
    """`kfp.dsl.utils.make_name_unique_by_adding_index`: `name`, or the first of `name-2`,
    `name-3`, ... not in `collection`, each try a set lookup instead of a scan of the list."""
    taken = set(collection)
    if name not in taken:
        return name
    return next(
        candidate
        for candidate in (f"{name}{delimiter}{index}" for index in itertools.count(2))
        if candidate not in taken
    )


@contextlib.contextmanager
def remembered_names() -> Iterator[None]:
    """Within the block, `kfp.dsl.utils.maybe_rename_for_k8s` answers each name once and
    `make_name_unique_by_adding_index` looks names up in a set."""
    from kfp.dsl import utils

    rename, unique = utils.maybe_rename_for_k8s, utils.make_name_unique_by_adding_index
    utils.maybe_rename_for_k8s = functools.cache(rename)
    utils.make_name_unique_by_adding_index = unique_name
    try:
        yield
    finally:
        utils.maybe_rename_for_k8s = rename
        utils.make_name_unique_by_adding_index = unique
