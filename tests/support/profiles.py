"""Helpers for the compiler tests: profiles built from the example profiles, compiled YAML parsed back."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from secureml.profile.model import TenantProfile

ROOT = Path(__file__).resolve().parents[2]
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


def profile_data(name: str = "team-a") -> dict[str, Any]:
    """An example profile as data; signatures not required so compiles need no bundles."""
    path = ROOT / "profiles" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["spec"].setdefault("images", {}).setdefault("signatures", {})["required"] = False
    return data


def merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` laid over it; a None value deletes the key."""
    result = copy.deepcopy(base)
    for key, value in change.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def make_profile(name: str = "team-a", **spec_changes: Any) -> TenantProfile:
    """An example profile with `spec` fields replaced (camelCase keys, as in YAML)."""
    data = profile_data(name)
    data["spec"] = merge(data["spec"], spec_changes)
    return TenantProfile.from_dict(data, source=f"test:{name}")


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
