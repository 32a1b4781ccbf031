"""A profile that requires confidential computing: every GPU step selects CC-ready nodes and
carries the annotation and variable the launcher reads; GPU-free steps do not; the compiled pod
passes the tenant's own admission rules (the preview)."""

from kfp import dsl

from secureml import WholeGPU, secure_component
from secureml.compile.compiler import compile_pipeline
from tests.support.compiled import IMAGE, env_of, executor
from tests.support.profiles import make_profile

REGISTRY = {"allowedRegistries": ["ghcr.io/acme/"], "signatures": {"required": True}}


@secure_component(image=IMAGE)
def prep(x: int) -> int:
    return x


@secure_component(image=IMAGE, gpu=WholeGPU(2))
def train(x: int) -> int:
    return x


@dsl.pipeline(name="cc")
def pipeline() -> None:
    train(x=prep(x=1).output)


def test_gpu_steps_select_cc_ready_nodes_and_tell_the_launcher() -> None:
    compiled = compile_pipeline(pipeline, make_profile("team-restricted", images=REGISTRY))
    steps = {s.task: s for s in compiled.steps}
    assert "nvidia.com/cc.ready.state=true" in steps["train"].scheduling
    assert "confidential computing" in steps["train"].controls
    assert "confidential computing" not in steps["prep"].controls
    container, k8s = executor(compiled.yaml_text, "train")
    assert k8s["nodeSelector"]["labels"]["nvidia.com/cc.ready.state"] == "true"
    assert k8s["podMetadata"]["annotations"]["secureml.dev/confidential-computing"] == "required"
    assert env_of(container)["SECUREML_CONFIDENTIAL_COMPUTING"] == "required"
    prep_container, prep_k8s = executor(compiled.yaml_text, "prep")
    assert "SECUREML_CONFIDENTIAL_COMPUTING" not in env_of(prep_container)
    assert "nvidia.com/cc.ready.state" not in prep_k8s.get("nodeSelector", {}).get("labels", {})


def test_without_the_requirement_nothing_changes() -> None:
    profile = make_profile("team-restricted", images=REGISTRY, gpu={"confidentialComputing": "off"})
    steps = {s.task: s for s in compile_pipeline(pipeline, profile).steps}
    train_step = steps["train"]
    assert not [s for s in train_step.scheduling if "cc.ready" in s]
