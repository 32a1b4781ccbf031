"""The image and components the compiler tests compile, and the compiled YAML parsed back."""

from __future__ import annotations

from typing import Any

import yaml

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"ghcr.io/acme/ml-images/train@{DIGEST}"
# The source of two secure components, to which a test appends its pipelines (a pipeline file).
COMPONENTS_SOURCE = f'''
from kfp import dsl, kubernetes
from secureml import MIG, secure_component

@secure_component(image="{IMAGE}")
def prepare(x: int) -> int:
    return x + 1

@secure_component(image="{IMAGE}", gpu=MIG("1g.10gb"))
def train(x: int) -> int:
    return x * 2
'''


def docs(yaml_text: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(yaml_text))


def executor(yaml_text: str, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(container of the task's executor, its kubernetes executor config) in the compiled YAML."""
    pipeline, *rest = docs(yaml_text)
    label = pipeline["components"][f"comp-{task}"]["executorLabel"]
    container = pipeline["deploymentSpec"]["executors"][label]["container"]
    platform = rest[0] if rest else {}
    k8s = (
        platform.get("platforms", {})
        .get("kubernetes", {})
        .get("deploymentSpec", {})
        .get("executors", {})
    )
    return container, k8s.get(label, {})


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}
