"""A trainer step compiles to a KFP task that submits a TrainJob the compiler built and checked."""

import json
from pathlib import Path
from typing import Any

import pytest

from secureml import MIG, WholeGPU
from secureml.compile.compiler import CompileError
from secureml.compile.trainer_rules import RULES
from secureml.core.errors import SecuremlError
from secureml.profile.runtime_image import launcher_prefix
from secureml.trainer.manifest import pod_patch_of
from secureml.trainer.submit import MODULE
from tests.support.compiled import executor
from tests.support.profiles import make_profile
from tests.support.trainer import compiled_trainer, trainer_pipeline, trainer_profile


def _rules(err: CompileError) -> set[str]:
    return {v.rule for v in err.violations}


def _trainjob_from_command(command: list[str]) -> dict[str, Any]:
    at = command.index("--trainjob")
    data: dict[str, Any] = json.loads(command[at + 1])
    return data


def test_step_submits_the_compiled_trainjob() -> None:
    compiled = compiled_trainer()
    container, k8s = executor(compiled.yaml_text, "train")
    command = container["command"]
    launcher = list(launcher_prefix(trainer_profile()))  # team-a's: the injected runtime's
    assert command[: len(launcher) + 3] == [*launcher, "python3", "-m", MODULE]
    # the step's own command follows, its KFP arguments stay the task's args
    assert command[command.index("--", len(launcher)) + 1 :][:1] == ["sh"]
    assert container["args"][:2] == ["--executor_input", "{{$}}"]
    job = _trainjob_from_command(command)
    step = compiled.steps[0]
    assert job == step.trainjob
    # the step pod itself asks for no GPU: the nodes do
    assert "accelerator" not in json.dumps(container.get("resources", {}))
    assert k8s["podMetadata"]["labels"]["secureml.dev/isolation"] == "none"
    assert step.isolation == "dedicated"
    assert step.resources == "2 node(s), each nvidia.com/gpu x2"


def test_trainjob_carries_the_tenants_rules() -> None:
    job = compiled_trainer().steps[0].trainjob
    assert job is not None
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["image"].split("@")[1].startswith("sha256:")
    assert trainer["command"] == list(launcher_prefix(trainer_profile()))
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "2"}}
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["SECUREML_ISOLATION"] == "dedicated"
    assert env["SECUREML_SCRUB_BEFORE"] == env["SECUREML_SCRUB_AFTER"] == "true"
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    pod = pod_patch_of(job)
    labels = pod["metadata"]["labels"]
    assert labels["secureml.dev/trainer-node"] == "true"
    assert labels["secureml.dev/tenant"] == "team-a"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "secureml-pipeline-runner"
    assert spec["nodeSelector"] == {"secureml.dev/pool": "dedicated"}
    assert spec["tolerations"][0]["value"] == "team-a"
    (node,) = spec["containers"]
    assert node["name"] == "node"
    assert node["securityContext"]["readOnlyRootFilesystem"] is True
    assert node["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert node["volumeMounts"] == [{"name": "scratch-tmp", "mountPath": "/tmp"}]


@pytest.mark.parametrize(
    ("component", "spec", "rule"),
    [
        ({}, {"trainer": None}, "trainer.forbidden"),
        ({"trainer_runtime": "mpi-distributed"}, {}, "trainer.runtime"),
        ({"nodes": 5}, {}, "trainer.max-nodes"),
        ({"gpu": MIG("1g.10gb")}, {}, "trainer.gpu-kind"),
        (
            {},
            {
                "trainer": {
                    "maxNodes": 4,
                    "maxGpusPerNode": 1,
                    "allowedRuntimes": ["torch-distributed"],
                }
            },
            "trainer.gpus-per-node",
        ),
        (
            {"nodes": 4, "gpu": WholeGPU(2)},
            {"gpu": {"quota": {"nvidia.com/gpu": 4}}},
            "trainer.quota",
        ),
        ({"packages_to_install": ["torch"]}, {}, "trainer.runtime-install"),
    ],
)
def test_compile_refuses_what_the_profile_does_not_allow(
    component: dict[str, Any], spec: dict[str, Any], rule: str
) -> None:
    with pytest.raises(CompileError) as caught:
        compiled_trainer(trainer_profile(**spec), **component)
    assert rule in _rules(caught.value)


def test_runtime_installs_are_refused_even_where_the_profile_allows_them() -> None:
    profile = trainer_profile(runtime={"allowRuntimeInstalls": True})
    with pytest.raises(CompileError) as caught:
        compiled_trainer(profile, packages_to_install=["torch"])
    assert _rules(caught.value) == {"trainer.runtime-install"}


def test_outputs_are_refused() -> None:
    from kfp import dsl

    from secureml import secure_component
    from secureml.compile.compiler import compile_pipeline
    from tests.support.compiled import IMAGE

    @secure_component(image=IMAGE, nodes=2, trainer_runtime="torch-distributed")
    def train() -> str:
        return "model"

    @dsl.pipeline(name="p")
    def pipeline() -> None:
        train()

    with pytest.raises(CompileError) as caught:
        compile_pipeline(pipeline, trainer_profile())
    assert _rules(caught.value) == {"trainer.outputs"}


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"nodes": 2}, "needs trainer_runtime"),
        ({"nodes": 0, "trainer_runtime": "torch-distributed"}, "whole number >= 1"),
        ({"trainer_runtime": ""}, "must name a ClusterTrainingRuntime"),
    ],
)
def test_decorator_refuses_bad_trainer_settings(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(SecuremlError, match=text):
        trainer_pipeline(gpu=None, **{"nodes": 1, "trainer_runtime": None, **kwargs})


def test_cpu_only_training_on_one_profile_without_gpus() -> None:
    compiled = compiled_trainer(gpu=None)
    job = compiled.steps[0].trainjob
    assert job is not None and "resourcesPerNode" not in job["spec"]["trainer"]
    labels = pod_patch_of(job)["metadata"]["labels"]
    assert labels["secureml.dev/isolation"] == "none"


def test_injected_runtime_puts_its_launcher_in_front_on_every_node() -> None:
    runtime = "registry.acme.example/platform/secureml-runtime@sha256:" + "d" * 64
    job = compiled_trainer(trainer_profile(runtime={"image": runtime})).steps[0].trainjob
    assert job is not None  # compiled: the node pods passed secureml.runtimeInjected
    assert job["spec"]["trainer"]["command"] == ["/opt/secureml/bin/secureml-launch", "--"]


def test_dra_tenants_get_no_gpu_nodes() -> None:
    profile = make_profile("team-dra", trainer={"maxNodes": 4, "maxGpusPerNode": 2,
                                                "allowedRuntimes": ["torch-distributed"]})  # fmt: skip
    with pytest.raises(CompileError) as caught:
        compiled_trainer(profile)
    assert "trainer.dra" in _rules(caught.value)


def test_every_trainer_rule_has_a_test_here() -> None:
    text = Path(__file__).read_text()
    assert [rule for rule in RULES if f'"{rule}"' not in text] == []
