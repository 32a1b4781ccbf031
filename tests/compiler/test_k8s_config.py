"""`TaskConfig` writes a task's kubernetes config exactly as the `kfp.kubernetes` setters of the
same names, called one by one on a task with a config of its own, write it.

No `from __future__ import annotations`: kfp reads the component's annotations as types."""

from kfp import dsl, kubernetes

from secureml.compile.k8s_config import TaskConfig


@dsl.component(base_image="python:3.11")
def step(x: int) -> int:
    return x + 1


AFFINITY = [{"key": "zone", "operator": "In", "values": ["a", "b"]}]


def _with_kfp(task: dsl.PipelineTask) -> None:
    kubernetes.add_node_selector(task, "pool", "gpu")
    kubernetes.add_node_affinity(task, match_expressions=AFFINITY)
    kubernetes.add_toleration(task, key="gpu", operator="Exists", effect="NoSchedule")
    for index in range(3):
        kubernetes.add_pod_label(task, f"label-{index}", str(index))
    kubernetes.add_pod_annotation(task, "note", '{"json": [1, 2]}')
    kubernetes.set_security_context(task, run_as_user=1000, run_as_group=1000, run_as_non_root=True)
    kubernetes.empty_dir_mount(task, volume_name="scratch", mount_path="/tmp")
    kubernetes.set_timeout(task, 600)


def _with_ours(task: dsl.PipelineTask) -> None:
    config = TaskConfig(task)
    config.add_node_selector("pool", "gpu")
    config.add_node_affinity(AFFINITY)
    config.add_toleration(key="gpu", operator="Exists", effect="NoSchedule")
    for index in range(3):
        config.add_pod_label(f"label-{index}", str(index))
    config.add_pod_annotation("note", '{"json": [1, 2]}')
    config.set_security_context(run_as_user=1000, run_as_group=1000)
    config.empty_dir_mount(volume_name="scratch", mount_path="/tmp")
    config.set_timeout(600)
    config.write()


def test_the_config_is_the_one_the_setters_write() -> None:
    configs = []

    @dsl.pipeline(name="p")
    def pipeline() -> None:
        by_kfp, by_us, untouched = step(x=1), step(x=2), step(x=3)
        for task in (by_kfp, by_us):  # a config of the task's own first
            kubernetes.add_pod_label(task, "own", "x")
            kubernetes.use_secret_as_env(task, "creds", {"token": "TOKEN"})
        _with_kfp(by_kfp)
        _with_ours(by_us)
        TaskConfig(untouched).write()  # nothing set: nothing written
        configs.extend(t.platform_config for t in (by_kfp, by_us, untouched))

    assert pipeline.platform_spec is not None
    by_kfp, by_us, untouched = configs
    assert by_us == by_kfp
    assert untouched == {}
