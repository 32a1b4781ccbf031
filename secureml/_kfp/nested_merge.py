"""kfp's merge of a nested pipeline's platform spec, kept from overwriting the parent's executors.

kfp 2.17 (`pipeline_spec_builder._merge_deployment_spec`) merges a nested pipeline's executors into
its parent's, renaming a nested executor whose label the parent already has (`exec-score` becomes
`exec-score-2`). It merges the nested pipeline's whole platform spec after *each* executor, so an
executor not yet renamed is merged under its old label: the parent's `exec-score` then gets the
nested task's kubernetes config. Which executors come first is protobuf map order, so the result
varies from run to run. With secureml every task has a config (its labels, annotations, security
context), so a component used both in a pipeline and in a pipeline it calls could get the nested
step's labels on the parent's pod, which admission refuses (the env names the other step).

During `fixed_merges()` the merge runs as kfp wrote it, and then every executor config the parent
had before is put back: a nested pipeline's executors always land under labels the parent did not
have, so restoring the parent's own is exactly the intended merge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def fixed_merges() -> Iterator[None]:
    """Within the block, merging a nested pipeline never changes the parent's executor configs."""
    from kfp.compiler import pipeline_spec_builder as builder

    original = builder._merge_deployment_spec

    def merge(*, main_platform_spec: Any, **kwargs: Any) -> None:
        before: dict[tuple[str, str], Any] = {}
        for platform, config in main_platform_spec.platforms.items():
            for label, executor in config.deployment_spec.executors.items():
                before[(platform, label)] = type(executor)()
                before[(platform, label)].CopyFrom(executor)
        original(main_platform_spec=main_platform_spec, **kwargs)
        for (platform, label), executor in before.items():
            main_platform_spec.platforms[platform].deployment_spec.executors[label].CopyFrom(
                executor
            )

    builder._merge_deployment_spec = merge
    try:
        yield
    finally:
        builder._merge_deployment_spec = original
