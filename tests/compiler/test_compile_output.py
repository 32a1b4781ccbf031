"""What `compile_pipeline` writes: loads back in kfp, parses strictly, carries the exact controls."""

import json

import pytest
from google.protobuf import json_format
from kfp import components, dsl
from kfp.kubernetes import kubernetes_executor_config_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from secureml import MIG, TimeSlice, secure_component
from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from tests.support.compiled import DIGEST, IMAGE, docs, env_of, executor
from tests.support.paths import REPO
from tests.support.profiles import make_profile
from tests.support.sample_steps import kfp_step, outer, plain_step, whole_container

REFERENCE = REPO / "pipelines" / "secure_finetune.py"
LAUNCHER = list(contract.RUNTIME_LAUNCHER_PREFIX)  # team-a names runtime.image
N = len(LAUNCHER)


@pytest.fixture(scope="module")
def reference_yaml() -> str:
    return compile_pipeline(load_pipeline(REFERENCE), make_profile()).yaml_text


def test_compiled_yaml_loads_back_in_kfp(reference_yaml: str) -> None:
    loaded = components.load_component_from_text(reference_yaml)
    assert loaded.name == "secure-finetune"
    assert set(loaded.pipeline_spec.root.dag.tasks) == {"prep", "train", "evaluate"}


def test_pipeline_and_platform_spec_parse_strictly(reference_yaml: str) -> None:
    pipeline, platform = docs(reference_yaml)
    json_format.ParseDict(pipeline, pipeline_spec_pb2.PipelineSpec())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-prep", "exec-train", "exec-evaluate"}
    for config in executors.values():
        json_format.ParseDict(config, kubernetes_executor_config_pb2.KubernetesExecutorConfig())


def test_repeat_compiles_are_byte_identical(reference_yaml: str) -> None:
    again = compile_pipeline(load_pipeline(REFERENCE), make_profile()).yaml_text
    assert again == reference_yaml


def test_a_pipeline_kfps_own_writer_writes_compiles_with_the_build_released() -> None:
    """An importer that downloads to the workspace goes through kfp's writer, which needs the
    built component: the CLI (`keep_component=False`) releases kfp's objects before the YAML is
    written, except that one, and writes what the in-process API writes."""

    @secure_component(image=IMAGE)
    def count(data: dsl.Input[dsl.Dataset]) -> int:
        return 1

    config = dsl.PipelineConfig(workspace=dsl.WorkspaceConfig(size="1Gi"))

    @dsl.pipeline(name="workspace", pipeline_config=config)
    def pipeline() -> None:
        imported = dsl.importer(
            artifact_uri="gs://bucket/data", artifact_class=dsl.Dataset, download_to_workspace=True
        )
        count(data=imported.output)

    kept = compile_pipeline(pipeline, make_profile())
    released = compile_pipeline(pipeline, make_profile(), keep_component=False)
    assert released.component is None and kept.component is not None
    assert released.yaml_text == kept.yaml_text
    assert "downloadToWorkspace: true" in released.yaml_text


def test_mig_step_exact(reference_yaml: str) -> None:
    container, k8s = executor(reference_yaml, "train")
    assert container["command"][:N] == LAUNCHER
    assert container["command"][N : N + 2] == ["sh", "-ec"]
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/mig-1g.10gb"
    assert container["resources"]["accelerator"]["resourceCount"] == "1"
    spiffe = "spiffe://acme.example/ns/team-a/pipeline/secure-finetune/step/train"
    assert env_of(container) == {
        "SECUREML_TENANT": "team-a",
        "SECUREML_NAMESPACE": "team-a",
        "SECUREML_PIPELINE": "secure-finetune",
        "SECUREML_STEP": "train",
        "SECUREML_ISOLATION": "mig",
        "SECUREML_IMAGE": container["image"],
        "SECUREML_IDENTITY_REQUIRED": "true",
        "SECUREML_EXPECTED_SPIFFE_ID": spiffe,
        "SECUREML_SCRUB_BEFORE": "true",
        "SECUREML_SCRUB_AFTER": "true",
        "SECUREML_SCRUB_VERIFY": "sample",
        "SECUREML_SHIM": "off",
        "SECUREML_GPU_REQUEST": '{"kind":"mig","profile":"1g.10gb","count":1}',
        "SPIFFE_ENDPOINT_SOCKET": "unix:///spiffe-workload-api/spire-agent.sock",
    }
    assert k8s["podMetadata"] == {
        "labels": {
            "secureml.dev/tenant": "team-a",
            "secureml.dev/pipeline": "secure-finetune",
            "secureml.dev/step": "train",
            "secureml.dev/isolation": "mig",
        },
        "annotations": {
            "secureml.dev/spiffe-id": spiffe,
            "secureml.dev/image-digest": container["image"].split("@")[1],
            "secureml.dev/gpu-request": '{"kind":"mig","profile":"1g.10gb","count":1}',
        },
    }
    assert k8s["securityContext"] == {
        "runAsUser": "1000",
        "runAsGroup": "1000",
        "runAsNonRoot": True,
    }
    assert k8s["emptyDirMounts"] == [{"volumeName": "scratch-tmp", "mountPath": "/tmp"}]
    assert k8s["activeDeadlineSeconds"] == "3600"
    assert "nodeSelector" not in k8s


def test_time_sliced_step_carries_shim_limits(reference_yaml: str) -> None:
    container, k8s = executor(reference_yaml, "evaluate")
    env = env_of(container)
    assert env["SECUREML_SHIM"] == "enforce"
    assert env["SECUREML_SHIM_LIMITS_FILE"] == contract.SHIM_LIMITS_PATH
    assert env["SECUREML_ISOLATION"] == "timeslice-shim"
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu.shared"
    assert k8s["nodeSelector"] == {"labels": {"nvidia.com/gpu.sharing-strategy": "time-slicing"}}
    assert k8s["podMetadata"]["annotations"]["secureml.dev/limits"] == (
        "version=1\nmemory=8589934592\ncompute=25\nscrub_on_free=1\nfirewall=1\n"
    )


def test_cpu_step_gets_defaults_without_gpu(reference_yaml: str) -> None:
    container, k8s = executor(reference_yaml, "prep")
    env = env_of(container)
    assert "resources" not in container or "accelerator" not in container["resources"]
    assert (env["SECUREML_ISOLATION"], env["SECUREML_SCRUB_BEFORE"], env["SECUREML_SHIM"]) == (
        "none",
        "false",
        "off",
    )
    assert "SECUREML_GPU_REQUEST" not in env
    assert k8s["podMetadata"]["labels"]["secureml.dev/isolation"] == "none"
    assert "secureml.dev/gpu-request" not in k8s["podMetadata"]["annotations"]


def test_plain_dsl_component_gets_profile_defaults() -> None:
    @dsl.pipeline(name="plain")
    def plain() -> None:
        kfp_step(x=1)

    container, k8s = executor(compile_pipeline(plain, make_profile()).yaml_text, "kfp-step")
    assert container["command"][:N] == LAUNCHER
    assert env_of(container)["SECUREML_STEP"] == "kfp-step"
    assert k8s["podMetadata"]["labels"]["secureml.dev/step"] == "kfp-step"
    assert k8s["securityContext"]["runAsNonRoot"] is True


def test_container_component_whole_gpu_dedicated_pool() -> None:
    @dsl.pipeline(name="whole")
    def whole() -> None:
        whole_container()

    container, k8s = executor(compile_pipeline(whole, make_profile()).yaml_text, "whole-container")
    assert container["command"] == [*LAUNCHER, "python3", "-c"]
    assert container["args"] == ["print('hi')"]
    assert container["resources"]["accelerator"] == {
        "count": "2",
        "resourceCount": "2",
        "resourceType": "nvidia.com/gpu",
        "type": "nvidia.com/gpu",
    }
    assert k8s["nodeSelector"] == {"labels": {"secureml.dev/pool": "dedicated"}}
    assert k8s["tolerations"] == [
        {
            "key": "secureml.dev/dedicated",
            "operator": "Equal",
            "value": "team-a",
            "effect": "NoSchedule",
        }
    ]
    assert json.loads(k8s["podMetadata"]["annotations"]["secureml.dev/gpu-request"]) == {
        "kind": "whole",
        "count": 2,
        "product": None,
    }


def test_single_strategy_one_product_is_a_node_selector() -> None:
    profile = make_profile(
        gpu={
            "migStrategy": "single",
            "models": ["H100-94GB"],
            "mig": {"allowedProfiles": ["1g.12gb"]},
            "wholeGpu": None,
            "quota": None,
        }
    )
    step = secure_component(gpu=MIG("1g.12gb"))(plain_step)

    @dsl.pipeline(name="single")
    def single() -> None:
        step(x=1)

    result = compile_pipeline(single, profile)  # the tenant's admission rules pass on the preview
    container, k8s = executor(result.yaml_text, "plain-step")
    assert result.admission_checked
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert k8s["nodeSelector"] == {
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-NVL-MIG-1g.12gb"}
    }


def test_single_strategy_several_products_is_a_required_affinity() -> None:
    profile = make_profile(
        gpu={"migStrategy": "single", "mig": {"allowedProfiles": ["1g.10gb"]}, "quota": None}
    )
    step = secure_component(gpu=MIG("1g.10gb"))(plain_step)

    @dsl.pipeline(name="single")
    def single() -> None:
        step(x=1)

    result = compile_pipeline(single, profile)  # secureml.migProfile.single accepts the affinity
    assert result.admission_checked
    container, k8s = executor(result.yaml_text, "plain-step")
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert k8s["nodeAffinity"] == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": [
                        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                        "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
                        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                        "NVIDIA-H100-PCIe-MIG-1g.10gb",
                    ],
                }
            ]
        }
    ]
    json_format.ParseDict(k8s, kubernetes_executor_config_pb2.KubernetesExecutorConfig())


def test_dra_backend_sets_the_claim_label_and_no_accelerator() -> None:
    step = secure_component(gpu=TimeSlice(memory="4Gi", compute=20))(plain_step)

    @dsl.pipeline(name="dra")
    def dra() -> None:
        step(x=1)

    container, k8s = executor(
        compile_pipeline(dra, make_profile("team-dra")).yaml_text, "plain-step"
    )
    assert "accelerator" not in container.get("resources", {})
    assert k8s["podMetadata"]["labels"]["secureml.dev/gpu-claim"] == "secureml-timeslice"
    assert k8s["podMetadata"]["labels"]["secureml.dev/isolation"] == "timeslice-shim"


def test_nested_pipeline_steps_are_secured_too() -> None:
    text = compile_pipeline(outer, make_profile()).yaml_text
    pipeline, platform = docs(text)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    steps = {cfg["podMetadata"]["labels"]["secureml.dev/step"] for cfg in executors.values()}
    assert steps == {"kfp-step", "inner.plain-step"}
    for label, spec in pipeline["deploymentSpec"]["executors"].items():
        assert spec["container"]["command"][:N] == LAUNCHER, label


def test_loaded_component_can_be_made_secure(tmp_path) -> None:
    from kfp import compiler

    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(kfp_step, str(path))
    secured = secure_component(gpu=MIG("1g.10gb"))(components.load_component_from_file(str(path)))

    @dsl.pipeline(name="loaded")
    def loaded() -> None:
        secured(x=1)

    container, _ = executor(compile_pipeline(loaded, make_profile()).yaml_text, "kfp-step")
    assert container["resources"]["accelerator"]["resourceType"] == "nvidia.com/mig-1g.10gb"
    assert container["image"] == f"ghcr.io/acme/ml-images/train@{DIGEST}"


def test_component_file_compiles_as_a_one_step_pipeline_with_the_image_spelled_out(
    tmp_path,
) -> None:
    from secureml.profile.model import load_profile

    file = tmp_path / "comp.py"
    file.write_text(
        "from kfp import dsl\n\n"
        "@dsl.component(base_image='python:3.11')\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
    )
    permissive = load_profile(REPO / "examples" / "profiles" / "permissive.yaml")
    result = compile_pipeline(load_pipeline(file), permissive)
    container, k8s = executor(result.yaml_text, "add")
    assert container["image"] == "docker.io/library/python:3.11"
    assert env_of(container)["SECUREML_IMAGE"] == "docker.io/library/python:3.11"
    # permissive names the platform runtime image: the injected launcher leads the step
    assert container["command"][:2] == list(contract.RUNTIME_LAUNCHER_PREFIX)
    assert docs(result.yaml_text)[0]["root"]["inputDefinitions"]["parameters"].keys() == {"a", "b"}
    assert "secureml.dev/image-digest" not in k8s["podMetadata"]["annotations"]


def test_yaml_writer_matches_kfps_own_writer(tmp_path) -> None:
    import yaml
    from kfp import compiler

    result = compile_pipeline(load_pipeline(REFERENCE), make_profile())
    path = tmp_path / "kfp.yaml"
    compiler.Compiler().compile(result.component, str(path))
    kfp_text = path.read_text()
    assert list(yaml.safe_load_all(kfp_text)) == list(yaml.safe_load_all(result.yaml_text))
    comments = [line for line in kfp_text.splitlines() if line.startswith("#")]
    assert comments == [line for line in result.yaml_text.splitlines() if line.startswith("#")]


def test_the_launcher_accepts_what_the_compiler_writes(reference_yaml: str, tmp_path) -> None:
    from secureml.enforcement.config import load_config, read_shim_limits

    for task, isolation in (("prep", "none"), ("train", "mig"), ("evaluate", "timeslice-shim")):
        container, k8s = executor(reference_yaml, task)
        env = env_of(container)
        config = load_config(env)
        assert (config.isolation, config.step, config.identity_required) == (isolation, task, True)
        if isolation != "none":
            assert config.gpu_request.to_json() == env["SECUREML_GPU_REQUEST"]
        limits = k8s["podMetadata"]["annotations"].get("secureml.dev/limits")
        if limits:
            path = tmp_path / f"{task}.limits"
            path.write_text(limits)
            parsed = read_shim_limits(path)
            assert (parsed.memory, parsed.compute) == (8 * 2**30, 25)
