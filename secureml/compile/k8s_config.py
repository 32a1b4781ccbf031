"""A task's kubernetes config as kfp.kubernetes's setters write it, built as one message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from kfp.kubernetes import kubernetes_executor_config_pb2 as pb

from secureml._kfp.proto_dict import message_dict

if TYPE_CHECKING:
    from kfp.dsl.pipeline_task import PipelineTask

# kfp.kubernetes.add_node_affinity's operators
_AFFINITY_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


class TaskConfig:
    """The task's `platform_config["kubernetes"]` as a message; `write()` stores its dict.

    Each method changes the message exactly as the `kfp.kubernetes` function of the same name
    changes the message it parses, so the dict written is the one those calls leave.
    """

    def __init__(self, task: PipelineTask) -> None:
        self.task = task
        self.message = json_format.ParseDict(
            task.platform_config.get("kubernetes", {}), pb.KubernetesExecutorConfig()
        )
        self.changed = False

    def add_node_selector(self, key: str, value: str) -> None:
        self.message.node_selector.labels[key] = value
        self.changed = True

    def add_node_affinity(self, match_expressions: Sequence[Mapping[str, Any]]) -> None:
        term = pb.NodeAffinityTerm()
        for expression in match_expressions:
            key, operator = expression.get("key"), expression.get("operator")
            if not key or operator not in _AFFINITY_OPERATORS:
                raise ValueError(f"invalid node affinity match expression {dict(expression)!r}")
            term.match_expressions.add(
                key=key, operator=operator, values=expression.get("values", [])
            )
        self.message.node_affinity.append(term)
        self.changed = True

    def add_toleration(self, **toleration: Any) -> None:
        self.message.tolerations.append(pb.Toleration(**toleration))
        self.changed = True

    def add_pod_label(self, key: str, value: str) -> None:
        self.message.pod_metadata.labels[key] = value
        self.changed = True

    def add_pod_annotation(self, key: str, value: str) -> None:
        self.message.pod_metadata.annotations[key] = value
        self.changed = True

    def set_security_context(self, *, run_as_user: int, run_as_group: int) -> None:
        context = self.message.security_context
        context.run_as_user = run_as_user
        context.run_as_group = run_as_group
        context.run_as_non_root = True
        self.changed = True

    def empty_dir_mount(self, volume_name: str, mount_path: str) -> None:
        self.message.empty_dir_mounts.append(
            pb.EmptyDirMount(volume_name=volume_name, mount_path=mount_path)
        )
        self.changed = True

    def set_timeout(self, seconds: int) -> None:
        if seconds < 0:
            raise ValueError(f"a timeout must be 0 or more seconds, not {seconds}")
        self.message.active_deadline_seconds = seconds
        self.changed = True

    def write(self) -> None:
        """The task's config, once, as the last of those setters would have written it."""
        if self.changed:
            self.task.platform_config["kubernetes"] = message_dict(self.message)
