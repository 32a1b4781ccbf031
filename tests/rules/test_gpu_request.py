"""`secureml.gpuMatchesRequest` on compiled pods: under every example profile, each GPU request the
profile offers compiles to a pod the catalogue admits, and that pod with its GPU raised or moved
after compile (the request left as compiled) is refused by the rule."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.gpu.placement import claim_template_name
from secureml.gpu.request import MIG, GPURequest, TimeSlice, WholeGPU
from secureml.pods.preview import preview_pods
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_profile
from secureml.rules.gpu_request import RULE_ID
from secureml.rules.resources import granted_resources
from tests.support.profiles import EXAMPLE_PROFILES, example_profile

DIGEST = "@sha256:" + "ab" * 32


def offered(profile: TenantProfile) -> list[GPURequest | None]:
    """One request of each kind and size the profile offers (and no GPU)."""
    gpu = profile.spec.gpu
    requests: list[GPURequest | None] = [None]
    if gpu.mig is not None:
        requests += [MIG(name) for name in gpu.mig.allowed_profiles]
    if gpu.time_slice is not None:
        requests.append(TimeSlice(memory="1Gi", compute=10))
    if gpu.whole_gpu is not None:
        requests += [WholeGPU(1), WholeGPU(gpu.whole_gpu.max_per_step)]
    return requests


def _written(request: GPURequest) -> str:
    """The request as a component writes it."""
    if isinstance(request, MIG):
        return f"MIG({request.profile!r}, {request.count})"
    if isinstance(request, TimeSlice):
        return f"TimeSlice(memory={request.memory_as_written!r}, compute={request.compute})"
    return f"WholeGPU({request.count})"


def _source(requests: list[GPURequest | None], image: str) -> str:
    lines = [
        "from kfp import dsl",
        "from secureml import MIG, TimeSlice, WholeGPU, secure_component",
    ]
    for index, request in enumerate(requests):
        gpu = "" if request is None else f", gpu={_written(request)}"
        lines += [
            f'@secure_component(image="{image}"{gpu})',
            f"def step{index}() -> None:",
            "    pass",
        ]
    lines.append("@dsl.pipeline(name='gpu-requests')")
    lines.append("def pipeline() -> None:")
    lines += [f"    step{index}()" for index in range(len(requests))]
    return "\n".join(lines) + "\n"


@functools.cache
def compiled_pods(profile_name: str, folder: Path) -> dict[str, dict[str, Any]]:
    """The executor pods (after the tenant's mutating policy) of a pipeline with one step per
    offered request, keyed by the request's JSON ("none" for the GPU-free step)."""
    profile = example_profile(profile_name)
    requests = offered(profile)
    path = folder / f"{profile_name}.py"
    registry = profile.spec.images.allowed_registries[0].rstrip("/")
    path.write_text(_source(requests, f"{registry}/train{DIGEST}"))
    compiled = compile_pipeline(load_pipeline(path), profile)  # the admission preview passes
    pods = preview_pods(list(yaml.safe_load_all(compiled.yaml_text)), profile)
    return {
        "none" if request is None else request.to_json(): pods[f"step{index}"]
        for index, request in enumerate(requests)
    }


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu-requests")


def main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)


def limits(pod: dict[str, Any]) -> dict[str, Any]:
    return main(pod).setdefault("resources", {}).setdefault("limits", {})


def refused(pod: dict[str, Any], profile_name: str) -> bool:
    rules = rules_for_profile(example_profile(profile_name))
    return RULE_ID in {v.rule for v in evaluate(pod, rules)}


def raises(pod: dict[str, Any], profile: TenantProfile) -> dict[str, dict[str, Any]]:
    """The pod with its GPU changed after compile in each way that applies, by name."""
    out: dict[str, dict[str, Any]] = {}
    dra = profile.spec.gpu.backend == "dra"
    granted = [r.name for r in granted_resources(profile)]
    held = [k for k in limits(pod) if k in granted]
    for name in held:
        more = copy.deepcopy(pod)
        limits(more)[name] = str(int(limits(more)[name]) + 1)
        out[f"{name} +1"] = more
        for other in granted:
            if other != name:
                moved = copy.deepcopy(pod)
                del limits(moved)[name]
                limits(moved)[other] = "1"
                out[f"{name} -> {other}"] = moved
    label = pod["metadata"]["labels"].get(contract.LABEL_GPU_CLAIM)
    if dra and label is not None:
        for request in offered(profile):
            template = claim_template_name(request) if request is not None else None
            if template is None or template == label:
                continue
            other = copy.deepcopy(pod)
            other["metadata"]["labels"][contract.LABEL_GPU_CLAIM] = template
            for claim in other["spec"].get("resourceClaims", []):
                claim["resourceClaimTemplateName"] = template
            out[f"claim template {template}"] = other
        beside = copy.deepcopy(pod)
        limits(beside)["nvidia.com/gpu"] = "1"
        out["device-plugin GPU beside the claim"] = beside
    if held or label is not None:
        bare = copy.deepcopy(pod)
        main(bare)["env"] = [e for e in main(bare)["env"] if e["name"] != contract.ENV_GPU_REQUEST]
        del bare["metadata"]["annotations"][contract.ANNOTATION_GPU_REQUEST]
        out["no request"] = bare
    for name in granted:
        launcher = copy.deepcopy(pod)
        init = next(
            c
            for c in launcher["spec"]["initContainers"]
            if c["name"] == contract.KFP_LAUNCHER_CONTAINER
        )
        init.setdefault("resources", {}).setdefault("limits", {})[name] = "1"
        out[f"{name} on kfp-launcher"] = launcher
    if not dra and granted:
        claimed = copy.deepcopy(pod)
        claimed["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimTemplateName": "secureml-gpu-1"}
        ]
        out["a claim beside"] = claimed
    return out


@pytest.mark.parametrize("profile_name", EXAMPLE_PROFILES)
def test_compiled_requests_are_admitted_and_every_raise_refused(
    profile_name: str, folder: Path
) -> None:
    profile = example_profile(profile_name)
    rules = rules_for_profile(profile)
    pods = compiled_pods(profile_name, folder)
    assert len(pods) == len(offered(profile)) > 1, profile_name
    tried = 0
    for request, pod in pods.items():
        assert evaluate(pod, rules) == [], (profile_name, request)
        for how, raised in raises(pod, profile).items():
            assert refused(raised, profile_name), (profile_name, request, how)
            tried += 1
    assert tried >= 3, profile_name


@pytest.mark.parametrize("profile_name", EXAMPLE_PROFILES)
def test_a_request_swapped_between_compiled_steps_is_refused(
    profile_name: str, folder: Path
) -> None:
    """Each compiled step's request (env and annotation) put on another compiled step's pod."""
    pods = compiled_pods(profile_name, folder)
    for request, pod in pods.items():
        for other in pods:
            if other == request or "none" in (request, other):
                continue
            swapped = copy.deepcopy(pod)
            swapped["metadata"]["annotations"][contract.ANNOTATION_GPU_REQUEST] = other
            for entry in main(swapped)["env"]:
                if entry["name"] == contract.ENV_GPU_REQUEST:
                    entry["value"] = other
            assert refused(swapped, profile_name), (profile_name, request, other)


def test_message_names_the_container_and_its_request(folder: Path) -> None:
    pod = copy.deepcopy(compiled_pods("team-a", folder)[MIG("1g.10gb").to_json()])
    limits(pod)["nvidia.com/mig-1g.10gb"] = "2"
    rules = [r for r in rules_for_profile(example_profile("team-a")) if r.id == RULE_ID]
    (violation,) = evaluate(pod, rules)
    assert violation.what.startswith(
        'container "main" holds a GPU that is not what its SECUREML_GPU_REQUEST '
        '({"kind":"mig","profile":"1g.10gb","count":1}) compiles to'
    ), violation.what
