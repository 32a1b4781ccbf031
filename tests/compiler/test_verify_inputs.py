"""`verify_inputs=`: the decorator checks the names, the compiler writes the annotation and the
launcher's variables (the trust from the profile's spec.models), and admission pins both."""

import copy
import json
from typing import Any

import pytest
from kfp import dsl
from kfp.dsl import Input, Model, Output

from secureml import ModelSignature, secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.pods.preview import preview_pods
from secureml.rules import evaluate, profile_rules
from secureml.supplychain.model_trust import profile_trust_json
from tests.support.compiled import docs, env_of, executor
from tests.support.profiles import make_profile

IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "1" * 64
SIGNERS = {
    "signers": [
        {
            "issuer": "https://token.actions.githubusercontent.com",
            "subjectRegExp": r"^https://github\.com/acme/models/",
        }
    ]
}


@secure_component(image=IMAGE)
def fetch(model: Output[Model]) -> None:
    pass


@secure_component(image=IMAGE, verify_inputs=["model"])
def train(model: Input[Model], epochs: int) -> None:
    pass


@secure_component(image=IMAGE, verify_inputs={"model": ModelSignature("sigs/bert.sig")})
def evaluate_model(model: Input[Model]) -> None:
    pass


@dsl.pipeline(name="signed-models")
def pipeline() -> None:
    model = fetch().outputs["model"]
    train(model=model, epochs=1)
    evaluate_model(model=model)


def test_the_task_carries_the_inputs_and_the_profiles_trust() -> None:
    profile = make_profile(models=SIGNERS)
    compiled = compile_pipeline(pipeline, profile)

    container, k8s = executor(compiled.yaml_text, "train")
    env = env_of(container)
    wire = '[{"name":"model","signature":"model.sig"}]'
    assert env[contract.ENV_VERIFY_INPUTS] == wire
    assert k8s["podMetadata"]["annotations"][contract.ANNOTATION_VERIFY_INPUTS] == wire
    trust = json.loads(env[contract.ENV_MODEL_TRUST])
    assert env[contract.ENV_MODEL_TRUST] == profile_trust_json(profile)
    assert trust == {**SIGNERS, "keys": [], "trustedRoot": "production"}
    other, _ = executor(compiled.yaml_text, "evaluate-model")
    assert json.loads(env_of(other)[contract.ENV_VERIFY_INPUTS]) == [
        {"name": "model", "signature": "sigs/bert.sig"}
    ]
    fetch_env = env_of(executor(compiled.yaml_text, "fetch")[0])
    assert contract.ENV_VERIFY_INPUTS not in fetch_env
    assert "verify model" in {s.task: s for s in compiled.steps}["train"].controls


def test_a_profile_without_model_signers_refuses_the_compile() -> None:
    with pytest.raises(CompileError) as err:
        compile_pipeline(pipeline, make_profile())
    rules = {(v.rule, v.task) for v in err.value.violations}
    assert rules == {
        ("model.no-trusted-signers", "train"),
        ("model.no-trusted-signers", "evaluate-model"),
    }


def _main_env(pod: dict[str, Any]) -> list[dict[str, Any]]:
    (main,) = [c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER]
    return main["env"]


def _launcher_env_violations(pod: dict[str, Any], profile: Any) -> list[str]:
    return [
        v.rule for v in evaluate(pod, profile_rules(profile)) if v.rule == "secureml.launcherEnv"
    ]


def test_admission_pins_the_trust_to_the_profile_and_the_inputs_to_the_annotation() -> None:
    profile = make_profile(models=SIGNERS)
    compiled = compile_pipeline(pipeline, profile)
    pods = preview_pods(docs(compiled.yaml_text), profile)
    pod = pods["train"]
    assert _launcher_env_violations(pod, profile) == []

    swapped = copy.deepcopy(pod)
    for item in _main_env(swapped):
        if item["name"] == contract.ENV_MODEL_TRUST:
            item["value"] = item["value"].replace("acme", "evil")
    assert _launcher_env_violations(swapped, profile) == ["secureml.launcherEnv"]

    other_inputs = copy.deepcopy(pod)
    for item in _main_env(other_inputs):
        if item["name"] == contract.ENV_VERIFY_INPUTS:
            item["value"] = '[{"name":"epochs","signature":"model.sig"}]'
    assert _launcher_env_violations(other_inputs, profile) == ["secureml.launcherEnv"]


def test_decorator_refuses_what_cannot_be_verified() -> None:
    with pytest.raises(SecuremlError, match="'weights', which is not an input"):

        @secure_component(image=IMAGE, verify_inputs=["weights"])
        def a(model: Input[Model]) -> None:
            pass

    with pytest.raises(SecuremlError, match="'epochs', which is a parameter"):

        @secure_component(image=IMAGE, verify_inputs=["epochs"])
        def b(epochs: int) -> None:
            pass

    with pytest.raises(SecuremlError, match="needs a Python component"):

        @secure_component(verify_inputs=["model"])
        def c(model: Input[Model]) -> dsl.ContainerSpec:
            return dsl.ContainerSpec(image=IMAGE, command=["serve", model.path])

    with pytest.raises(SecuremlError, match=r"verify_input= \(did you mean verify_inputs=\?\)"):

        @secure_component(image=IMAGE, verify_input=["model"])
        def d(model: Input[Model]) -> None:
            pass

    with pytest.raises(SecuremlError, match="not a relative path inside the model folder"):
        ModelSignature("../outside.sig")
