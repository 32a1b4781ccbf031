"""kfp.kubernetes's setters on one task, sharing one parsed config message.

Each `kfp.kubernetes` setter (`add_pod_label`, `add_toleration`, `empty_dir_mount`, ...) parses the
task's whole kubernetes config from its dict into a `KubernetesExecutorConfig` message
(`common.get_existing_kubernetes_config_as_message`), changes the message and writes it back as a
dict. The compiler makes about ten such calls per task, so each task's config was parsed ten times
over: the largest part of re-tracing a pipeline with the controls.

Within `one_message(task)` that getter hands every setter the same message for `task`, parsed once
at the start; each setter still changes it and writes the whole dict back as before. The message a
setter gets is then the one the previous setter wrote, not that message's dict parsed again: the
same message, because the dict is the message's own proto3 JSON form (`MessageToDict`) and
parsing it gives the message back. So every setter sees and writes what it would have, provided
nothing but kfp.kubernetes setters writes the task's config inside the block (the compiler's own
code only reads it there). Other tasks get kfp's getter; kfp's function is put back after.

Each setter also turned the whole message into a dict (`MessageToDict`) and stored it, only for
the next setter to be handed the message instead: within the block, `MessageToDict` of that one
message is a placeholder the setters store, and the dict is written once when the block ends
(also when a setter raised): the dict of the message as the last setter left it, which is what
the last setter wrote before (`secureml._kfp.proto_dict`, the same dict). Nothing reads the task's
config between two setters of the block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfp.dsl.pipeline_task import PipelineTask


@contextlib.contextmanager
def one_message(task: PipelineTask) -> Iterator[None]:
    """Within the block, kfp.kubernetes's setters on `task` share one parsed config message."""
    from google.protobuf import json_format
    from kfp.kubernetes import common

    from secureml._kfp.proto_dict import message_dict

    original, to_dict = common.get_existing_kubernetes_config_as_message, json_format.MessageToDict
    message = original(task)
    pending = object()  # not a dict: anything that read it between two setters would fail loudly

    def existing(of: PipelineTask) -> Any:
        return message if of is task else original(of)

    def as_dict(of: Any, *args: Any, **kwargs: Any) -> Any:
        return (
            pending if of is message and not args and not kwargs else to_dict(of, *args, **kwargs)
        )

    common.get_existing_kubernetes_config_as_message = existing
    json_format.MessageToDict = as_dict  # type: ignore[assignment]  # for these setters only
    try:
        yield
    finally:
        common.get_existing_kubernetes_config_as_message = original
        json_format.MessageToDict = to_dict
        if task.platform_config.get("kubernetes") is pending:
            task.platform_config["kubernetes"] = message_dict(message)
