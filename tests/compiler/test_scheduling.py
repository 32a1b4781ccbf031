"""Placement in the compiled task: GPU-free steps keep off the GPU pools, the report lists every
selector, affinity term and toleration (the task's own first), and the admission rules judge what
a task adds itself on the preview."""

from kfp import dsl, kubernetes

from secureml import TimeSlice, secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from tests.support.compiled import IMAGE
from tests.support.profiles import make_profile


@secure_component(image=IMAGE)
def cpu_step(x: int) -> int:
    return x


shared_step = secure_component(image=IMAGE, gpu=TimeSlice(memory="4Gi", compute=10))(
    cpu_step.python_func
)


def _pipeline(configure=lambda task: None, component=cpu_step):
    @dsl.pipeline(name="placement")
    def pipeline() -> None:
        configure(component(x=1))

    return pipeline


def test_gpu_free_step_excludes_the_gpu_pools_and_the_report_says_so() -> None:
    (step,) = compile_pipeline(_pipeline(), make_profile()).steps
    assert step.scheduling == [
        "nvidia.com/gpu.sharing-strategy NotIn (time-slicing)",
        "secureml.dev/pool NotIn (dedicated)",
    ]


def test_report_lists_the_tasks_own_selector_and_toleration() -> None:
    def configure(task) -> None:
        kubernetes.add_node_selector(task, "kubernetes.io/arch", "amd64")
        kubernetes.add_toleration(
            task, key="secureml.dev/dedicated", operator="Equal", value="team-a",
            effect="NoSchedule",
        )  # fmt: skip

    (step,) = compile_pipeline(_pipeline(configure, shared_step), make_profile()).steps
    assert step.scheduling[:2] == [
        "task sets kubernetes.io/arch=amd64",
        "task tolerates secureml.dev/dedicated:Equal:team-a:NoSchedule",
    ]
    assert "nvidia.com/gpu.sharing-strategy=time-slicing" in step.scheduling


def test_a_toleration_of_another_tenant_is_refused_on_the_preview() -> None:
    def configure(task) -> None:
        kubernetes.add_toleration(task, key="secureml.dev/dedicated", value="team-restricted")

    try:
        compile_pipeline(_pipeline(configure), make_profile())
    except CompileError as err:
        assert {v.rule for v in err.violations} == {"secureml.tolerations"}
    else:
        raise AssertionError("another tenant's toleration compiled")


def test_a_node_selector_outside_the_pools_is_refused_on_the_preview() -> None:
    def configure(task) -> None:
        kubernetes.add_node_selector(task, "kubernetes.io/hostname", "gpu-node-7")

    try:
        compile_pipeline(_pipeline(configure), make_profile())
    except CompileError as err:
        assert {v.rule for v in err.violations} == {"secureml.nodeSelector"}
    else:
        raise AssertionError("a node chosen by name compiled")
