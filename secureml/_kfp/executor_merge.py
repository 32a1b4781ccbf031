"""kfp's merge of each task's executor config into the pipeline's platform spec, by one copy.

kfp 2.17's `merge_platform_deployment_config` adds a task's kubernetes config (a `Struct`) to the
pipeline's under the task's executor label: it takes the config already there or a new empty
`Struct`, `update`s it from the task's and copies the result in. `Struct.update` is protobuf's
pure-Python walk (every value read out as a Python value and written back as a new `Value`), about
0.15 ms a task for the configs the compiler writes, 10-20 % of its build of the pipeline.

An executor label is new in the pipeline for every task but a nested pipeline's repeats, and for a
new label that walk only rebuilds the task's `Struct` value by value: `_SetStructValue` writes
each kind as `_GetStructValue` read it (null, bool, string, number, and a struct or list by
recursing), and every value of a config parsed from JSON has a kind. So `CopyFrom` of the task's
`Struct` writes the same message. During `copied_executor_configs()` a new label is merged that
way and a label already there as kfp does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def copied_executor_configs() -> Iterator[None]:
    """Within the block, a task's config under a new executor label is copied in, not rebuilt."""
    from kfp.compiler import pipeline_spec_builder as builder

    original = builder.merge_platform_deployment_config

    def merge(main_msg: Any, sub_msg: Any) -> None:
        executors = main_msg.executors
        for label, config in sub_msg.executors.items():
            if label in executors:
                original(main_msg, _only(sub_msg, label))
            else:
                executors[label].CopyFrom(config)

    builder.merge_platform_deployment_config = merge
    try:
        yield
    finally:
        builder.merge_platform_deployment_config = original


def _only(deployment: Any, label: str) -> Any:
    """`deployment` with just the executor `label` (for kfp's own merge of that one)."""
    single = type(deployment)()
    single.executors[label].CopyFrom(deployment.executors[label])
    return single
