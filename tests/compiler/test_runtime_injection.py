"""A profile with `runtime.image` (issue 10, class 9): the compiler puts the injected launcher in
front of every step, the preview shows the runtime the mutating policy injects, and the previewed
pods are admitted; without it the in-image launcher stays."""

from __future__ import annotations

import yaml

from secureml import contract
from secureml.compiler import compile_pipeline
from secureml.pipeline_loader import load_pipeline
from secureml.preview import preview_driver_pods, preview_pods
from secureml.profile import TenantProfile
from secureml.rules import evaluate, rules_for_level, rules_for_profile
from tests.rules.conftest import REPO, example_profile

PIPELINE = REPO / "pipelines" / "secure_finetune.py"
IMAGE = "registry.acme.example/platform/secureml-runtime@sha256:" + "c" * 64


def _injected_team_a() -> TenantProfile:
    data = example_profile("team-a").model_dump(by_alias=True, mode="json")
    data["spec"]["runtime"]["image"] = IMAGE
    return TenantProfile.from_dict(data)


def _commands(compiled_yaml: str) -> list[list[str]]:
    documents = list(yaml.safe_load_all(compiled_yaml))
    executors = documents[0]["deploymentSpec"]["executors"]
    return [e["container"]["command"] for e in executors.values() if "container" in e]


def test_injected_launcher_in_front_and_previewed_pods_admitted() -> None:
    profile = _injected_team_a()
    compiled = compile_pipeline(load_pipeline(PIPELINE), profile)
    commands = _commands(compiled.yaml_text)
    assert commands and all(c[:2] == [contract.RUNTIME_LAUNCHER, "--"] for c in commands), commands
    documents = list(yaml.safe_load_all(compiled.yaml_text))
    pods = preview_pods(documents, profile)
    rules = rules_for_profile(profile)
    for task, pod in {**pods, **preview_driver_pods(documents, profile)}.items():
        assert evaluate(pod, rules) == [], task
        assert evaluate(pod, rules_for_level("restricted")) == [], task
    for task, pod in pods.items():
        init = [c["name"] for c in pod["spec"]["initContainers"]]
        assert init[0] == contract.RUNTIME_INIT_CONTAINER, (task, init)
        (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
        argv = [*main.get("command", []), *main.get("args", [])]
        assert contract.RUNTIME_LAUNCHER in argv and contract.LAUNCHER_MODULE not in argv


def test_without_runtime_image_the_in_image_launcher_stays() -> None:
    compiled = compile_pipeline(load_pipeline(PIPELINE), example_profile("team-a"))
    assert all(c[:4] == list(contract.LAUNCHER_PREFIX) for c in _commands(compiled.yaml_text))
