"""kfp-native GPU requests (issue 12 item 6): `set_accelerator_type(...).set_accelerator_limit(n)`,
how KFP users ask for GPUs, is read as the GPU kind it names and checked and placed like `gpu=`;
an accelerator chosen at run time is still refused."""

import json

import pytest
from kfp import dsl

from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.core import contract
from tests.support.compiled import IMAGE, executor
from tests.support.profiles import make_profile


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train(x: int) -> int:
    return x


def pipeline_with(accelerator, limit=None):
    @dsl.pipeline(name="native")
    def native(choice: str = "nvidia.com/gpu") -> None:
        task = train(x=1).set_accelerator_type(choice if accelerator is None else accelerator)
        if limit is not None:
            task.set_accelerator_limit(limit)

    return native


def compiled_train(pipeline, profile=None):
    result = compile_pipeline(pipeline, profile or make_profile())
    (step,) = result.steps
    container, k8s = executor(result.yaml_text, "train")
    env = {item["name"]: item["value"] for item in container["env"]}
    return step, container, k8s, env


def rules_of(pipeline, profile=None) -> list[str]:
    with pytest.raises(CompileError) as err:
        compile_pipeline(pipeline, profile or make_profile())
    return sorted(v.rule for v in err.value.violations)


def test_whole_gpus_go_to_the_dedicated_pool_like_wholegpu() -> None:
    step, container, k8s, env = compiled_train(pipeline_with("nvidia.com/gpu", 2))
    assert (step.isolation, step.resources) == ("dedicated", "nvidia.com/gpu x2")
    assert json.loads(env["SECUREML_GPU_REQUEST"]) == {"kind": "whole", "count": 2, "product": None}
    accelerator = container["resources"]["accelerator"]
    assert (accelerator["resourceType"], accelerator["resourceCount"]) == ("nvidia.com/gpu", "2")
    assert k8s["podMetadata"]["labels"]["secureml.dev/isolation"] == "dedicated"


def test_a_mig_resource_name_is_that_mig_profile() -> None:
    step, container, _, env = compiled_train(pipeline_with("nvidia.com/mig-1g.10gb"))
    assert (step.isolation, step.resources) == ("mig", "nvidia.com/mig-1g.10gb x1")
    assert json.loads(env["SECUREML_GPU_REQUEST"]) == {
        "kind": "mig",
        "profile": "1g.10gb",
        "count": 1,
    }


def test_the_time_slice_resource_is_one_share_at_the_profiles_limits() -> None:
    step, _, k8s, env = compiled_train(pipeline_with("nvidia.com/gpu.shared", 1))
    assert step.isolation == "timeslice-shim"  # team-a enforces the shim
    request = json.loads(env["SECUREML_GPU_REQUEST"])
    assert request == {"kind": "timeslice", "memory": 16 * 2**30, "compute": 50}
    assert "memory=17179869184\n" in k8s["podMetadata"]["annotations"]["secureml.dev/limits"]
    assert env[contract.ENV_SHIM_MODE] == "enforce"


@pytest.mark.parametrize(
    ("accelerator", "limit", "expected"),
    [
        ("nvidia.com/mig-4g.40gb", None, ["gpu.mig-profile-not-allowed"]),  # checked like gpu=MIG
        ("nvidia.com/gpu", 3, ["gpu.quota", "gpu.whole-count"]),  # team-a: 2 per step, quota 2
        ("nvidia.com/gpu.shared", 2, ["accelerator.not-allowed"]),  # one share per step
        ("nvidia.com/gpu", 0, ["accelerator.not-allowed"]),
        ("amd.com/gpu", None, ["accelerator.not-allowed"]),
        (None, None, ["accelerator.not-allowed"]),  # chosen at run time: a pipeline parameter
    ],
)
def test_kfp_native_requests_are_checked_like_gpu(accelerator, limit, expected) -> None:
    assert rules_of(pipeline_with(accelerator, limit)) == expected


def test_on_the_dra_backend_the_claim_replaces_the_native_resource() -> None:
    dra = make_profile(gpu={"backend": "dra", "quota": None})
    step, container, k8s, _ = compiled_train(pipeline_with("nvidia.com/gpu", 1), dra)
    assert step.isolation == "dedicated"
    assert k8s["podMetadata"]["labels"]["secureml.dev/gpu-claim"] == "secureml-gpu-1"
    assert "accelerator" not in container.get("resources", {})


@pytest.mark.parametrize("call", ["set_accelerator_limit", "set_gpu_limit"])
def test_a_gpu_limit_without_a_type_is_refused_not_dropped(call: str) -> None:
    @dsl.pipeline(name="limit-only")
    def limit_only() -> None:
        task = train(x=1)
        with pytest.warns(DeprecationWarning) if call == "set_gpu_limit" else _no_warning():
            getattr(task, call)("2")

    with pytest.raises(CompileError) as err:
        compile_pipeline(limit_only, make_profile())
    (violation,) = err.value.violations
    assert violation.rule == "accelerator.without-type" and violation.task == "train"
    assert "set_accelerator_limit(2)" in violation.what and "WholeGPU" in violation.fix


def _no_warning():  # type: ignore[no-untyped-def]
    import contextlib

    return contextlib.nullcontext()
