"""kfp.kubernetes setters inside `one_message(task)` write exactly the config they write one by one,
and kfp's getter and `MessageToDict` are back afterwards (also when a setter fails), the config
written.

No `from __future__ import annotations`: kfp reads the component's annotations as types."""

import pytest
from google.protobuf import json_format
from kfp import dsl, kubernetes
from kfp.kubernetes import common

from secureml._kfp.k8s_config import one_message


@dsl.component(base_image="python:3.11")
def step(x: int) -> int:
    return x + 1


def _configure(task: dsl.PipelineTask) -> None:
    kubernetes.add_node_selector(task, "pool", "gpu")
    kubernetes.add_node_affinity(
        task, match_expressions=[{"key": "zone", "operator": "In", "values": ["a", "b"]}]
    )
    kubernetes.add_toleration(task, key="gpu", operator="Exists", effect="NoSchedule")
    for index in range(3):
        kubernetes.add_pod_label(task, f"label-{index}", str(index))
    kubernetes.add_pod_annotation(task, "note", '{"json": [1, 2]}')
    kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000)
    kubernetes.empty_dir_mount(task, volume_name="scratch", mount_path="/tmp", size_limit="1Gi")
    kubernetes.set_timeout(task, 600)


def test_one_message_writes_what_the_setters_write_one_by_one() -> None:
    configs = []

    @dsl.pipeline(name="p")
    def pipeline() -> None:
        plain, shared, other = step(x=1), step(x=2), step(x=3)
        kubernetes.add_pod_label(plain, "first", "x")
        kubernetes.add_pod_label(shared, "first", "x")
        _configure(plain)
        with one_message(shared):
            _configure(shared)
            kubernetes.add_pod_label(other, "own", "y")  # another task: kfp's own getter
        configs.extend(t.platform_config["kubernetes"] for t in (plain, shared, other))

    assert pipeline.platform_spec is not None
    plain, shared, other = configs
    assert shared == plain
    assert other == {"podMetadata": {"labels": {"own": "y"}}}


def test_kfp_gets_its_getter_back() -> None:
    original, to_dict = common.get_existing_kubernetes_config_as_message, json_format.MessageToDict
    configs = []

    @dsl.pipeline(name="p")
    def pipeline() -> None:
        task = step(x=1)
        with pytest.raises(RuntimeError), one_message(task):
            assert common.get_existing_kubernetes_config_as_message is not original
            kubernetes.add_pod_label(task, "before", "failing")
            raise RuntimeError
        configs.append(task.platform_config["kubernetes"])

    assert pipeline.platform_spec is not None
    assert common.get_existing_kubernetes_config_as_message is original
    assert json_format.MessageToDict is to_dict
    assert configs == [{"podMetadata": {"labels": {"before": "failing"}}}]
