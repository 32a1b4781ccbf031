"""A profile with `runtime.image` (issue 10, class 9): the compiler puts the injected launcher in
front of every step, the preview shows the runtime the mutating policy injects, and the previewed
pods are admitted; without it the in-image launcher stays."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.pods.preview import preview_driver_pods, preview_pods
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_level, rules_for_profile
from tests.support.paths import REPO
from tests.support.profiles import example_profile

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
    data = example_profile("team-a").model_dump(by_alias=True, mode="json", exclude_none=True)
    del data["spec"]["runtime"]["image"]
    compiled = compile_pipeline(load_pipeline(PIPELINE), TenantProfile.from_dict(data))
    assert all(c[:4] == list(contract.LAUNCHER_PREFIX) for c in _commands(compiled.yaml_text))


def _previewed_timeslice_and_mig_pods() -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference pipeline's time-sliced (shim) step and its MIG step, as the cluster admits
    them under team-a with the platform's runtime injected."""
    profile = _injected_team_a()
    compiled = compile_pipeline(load_pipeline(PIPELINE), profile)
    pods = preview_pods(list(yaml.safe_load_all(compiled.yaml_text)), profile).values()
    by_isolation = {pod["metadata"]["labels"][contract.LABEL_ISOLATION]: pod for pod in pods}
    return by_isolation["timeslice-shim"], by_isolation["mig"]


def _runtime_rule(profile: TenantProfile) -> list[Any]:
    return [r for r in rules_for_profile(profile) if r.id == "secureml.runtimeInjected"]


def test_time_sliced_step_preloads_the_injected_shim_and_nothing_else() -> None:
    """A shim step preloads exactly the injected shim; the image's own shim, a tenant's library or
    the injected shim on a MIG step (outside its limits) is refused."""
    profile = _injected_team_a()
    shim_step, mig_step = _previewed_timeslice_and_mig_pods()
    key = contract.ANNOTATION_SHIM_PRELOAD
    assert shim_step["metadata"]["annotations"][key] == contract.RUNTIME_SHIM
    assert evaluate(shim_step, rules_for_profile(profile)) == []
    for other in (contract.SHIM_LIBRARY_PATH, "/tmp/own.so", ""):
        pod = copy.deepcopy(shim_step)
        pod["metadata"]["annotations"][key] = other
        (violation,) = evaluate(pod, _runtime_rule(profile))
        assert contract.RUNTIME_SHIM in violation.what, other
    pod = copy.deepcopy(shim_step)
    del pod["metadata"]["annotations"][key]
    assert evaluate(pod, _runtime_rule(profile))
    pod = copy.deepcopy(mig_step)
    pod["metadata"]["annotations"][key] = contract.RUNTIME_SHIM
    assert evaluate(pod, _runtime_rule(profile))
