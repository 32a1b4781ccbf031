"""Undo kfp 2.17's merge of a nested pipeline's platform spec over its parent's executors.

See docs/upstream/kfp-nested-merge.md; `restore_own_configs` rewrites the parent's configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent
    from kfp.dsl.pipeline_task import PipelineTask


def restore_own_configs(component: GraphComponent, tasks: Mapping[str, PipelineTask]) -> None:
    """Give each container task of `tasks` (the pipeline's own, as kfp traced them) the platform
    config kfp merged for it, where the pipeline calls another pipeline.

    kfp merged a task's config under its executor label when the label was new, so that merge
    wrote exactly `platform_config_to_platform_spec` of the task's config; writing it again after
    the build puts back what a nested pipeline's merge overwrote, and changes nothing else.
    """
    if not any(task.pipeline_spec is not None for task in tasks.values()):
        return  # nothing nested was merged
    from kfp.compiler.pipeline_spec_builder import platform_config_to_platform_spec
    from kfp.dsl.utils import sanitize_task_name

    spec = component.pipeline_spec
    platforms = component.platform_spec.platforms
    by_name = {sanitize_task_name(name): task for name, task in tasks.items()}
    dags: list[Any] = [spec.root]  # the pipeline's DAG and its groups' (loops, conditions, ...)
    while dags:
        dag_component = dags.pop()
        in_dag = list(dag_component.dag.tasks.keys())
        for name, task_spec in dag_component.dag.tasks.items():
            inner = spec.components[task_spec.component_ref.name]
            task = by_name.get(name)
            if inner.executor_label:
                if task is None or task.container_spec is None or not task.platform_config:
                    continue
                own = platform_config_to_platform_spec(
                    task.platform_config,
                    inner.executor_label,
                    parent_component_inputs=dag_component.input_definitions,
                    tasks_in_current_dag=in_dag,
                )
                for key, platform in own.platforms.items():
                    executors = platform.deployment_spec.executors
                    platforms[key].deployment_spec.executors[inner.executor_label].CopyFrom(
                        executors[inner.executor_label]
                    )
            elif inner.HasField("dag") and (task is None or task.pipeline_spec is None):
                dags.append(inner)  # a group of this pipeline; a nested pipeline's are its own
