"""MIG on the device plugin's `single` strategy: the pod asks for nvidia.com/gpu, is labelled
`mig`, and is pinned to the MIG-suffixed GFD products of its allowed profiles, by a nodeSelector
(one product) or a required node affinity `In` (several), exactly as `secureml.gpu.placement.placement`
writes them. Exact verdicts under the whole catalogue, through the real engine."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from secureml.gpu.placement import placement
from secureml.gpu.request import MIG, WholeGPU
from secureml.nvidia.catalogue import mig_product_names
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_profile
from secureml.rules.placement import placement_rules
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR
from tests.support.submitted_pods import admitted

PRODUCT = "nvidia.com/gpu.product"
MODELS = ["A100-80GB", "H100-80GB"]
ALLOWED_PROFILES = ["1g.10gb"]  # the profile model allows one profile on `single`
# Every MIG product of the allowed profile on the tenant's models (A100-80GB and H100-80GB have two each).
PRODUCTS_1G = [
    "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
    "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
    "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
    "NVIDIA-H100-PCIe-MIG-1g.10gb",
]
POOL = {"secureml.dev/pool": "dedicated"}


def single_profile(whole_gpu: bool) -> TenantProfile:
    data = yaml.safe_load((PROFILES_DIR / "team-a.yaml").read_text())
    gpu = data["spec"]["gpu"]
    gpu["migStrategy"] = "single"
    gpu["models"] = MODELS
    gpu["mig"] = {"allowedProfiles": ALLOWED_PROFILES}
    gpu["quota"] = {"nvidia.com/gpu": 4}
    if not whole_gpu:
        gpu.pop("wholeGpu")
    return TenantProfile.from_dict(data, source="single")


WITH_WHOLE = single_profile(whole_gpu=True)
MIG_ONLY = single_profile(whole_gpu=False)
PROFILES = {True: WITH_WHOLE, False: MIG_ONLY}
RULES = {True: rules_for_profile(WITH_WHOLE), False: rules_for_profile(MIG_ONLY)}


def mig_pod(count: str = "1") -> dict[str, Any]:
    """team-a's allowed MIG pod, turned into a `single`-strategy one with no product constraint
    (its request, env and annotation, of `count` instances)."""
    pod = yaml.safe_load((ATTACKS_DIR.parent / "allowed" / "team-a-mig.yaml").read_text())
    main = pod["spec"]["containers"][0]
    main["resources"] = {"limits": {"nvidia.com/gpu": count}}
    return with_request(pod, MIG(ALLOWED_PROFILES[0], int(count)))


def with_request(pod: dict[str, Any], request: MIG | WholeGPU) -> dict[str, Any]:
    """`pod` with `request` as its compiled GPU request (annotation and main's env)."""
    pod["metadata"]["annotations"]["secureml.dev/gpu-request"] = request.to_json()
    for entry in pod["spec"]["containers"][0]["env"]:
        if entry["name"] == "SECUREML_GPU_REQUEST":
            entry["value"] = request.to_json()
    return pod


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(term)} for term in terms]
            }
        }
    }


def product_in(values: list[str], operator: str = "In") -> dict[str, Any]:
    return {"key": PRODUCT, "operator": operator, "values": list(values)}


# The scheduling vocabulary (which node labels, which affinity operators) has its own rules and
# tests (secureml.rules.placement, tests/rules/test_placement.py); here: secureml.migProfile.single.
PLACEMENT = {r.id for r in placement_rules(WITH_WHOLE)} | {r.id for r in placement_rules(MIG_ONLY)}
# The tests relabel the pod's isolation; the launcher's settings follow that label
# (secureml.launcherEnv, tested in tests/rules/test_launcher_rules.py).
LAUNCHER_ENV = "secureml.launcherEnv"


def failed(pod: dict[str, Any], whole_gpu: bool = True) -> set[str]:
    judged = admitted(pod, PROFILES[whole_gpu])
    return {v.rule for v in evaluate(judged, RULES[whole_gpu])} - PLACEMENT - {LAUNCHER_ENV}


def test_catalogue_products_are_the_compilers() -> None:
    assert mig_product_names("1g.10gb", MODELS) == PRODUCTS_1G


@pytest.mark.parametrize("whole_gpu", [True, False])
@pytest.mark.parametrize("profile_name", ALLOWED_PROFILES)
def test_what_the_compiler_places_is_allowed(profile_name: str, whole_gpu: bool) -> None:
    """The placement the compiler writes (here several products: a required affinity `In`)."""
    profile = WITH_WHOLE if whole_gpu else MIG_ONLY
    where = placement(MIG(profile_name), profile)
    assert where.accelerator_type == "nvidia.com/gpu" and where.isolation == "mig"
    assert where.node_selector == {}
    pod = mig_pod()
    pod["spec"]["affinity"] = required(where.node_affinity)
    assert failed(pod, whole_gpu) == set()


@pytest.mark.parametrize("whole_gpu", [True, False])
@pytest.mark.parametrize("product", PRODUCTS_1G)
def test_one_product_node_selector_is_allowed(product: str, whole_gpu: bool) -> None:
    pod = mig_pod()
    pod["spec"]["nodeSelector"] = {PRODUCT: product}
    assert failed(pod, whole_gpu) == set()


def test_mig_count_is_not_a_whole_gpu_count() -> None:
    """team-a allows 2 whole GPUs per step; 3 MIG instances of one step are not whole GPUs."""
    pod = mig_pod(count="3")
    pod["spec"]["nodeSelector"] = {PRODUCT: PRODUCTS_1G[0]}
    assert failed(pod) == set()
    pod["metadata"]["labels"]["secureml.dev/isolation"] = "dedicated"
    pod["spec"]["nodeSelector"] = dict(POOL)
    # ...and its request still says MIG: relabelled, it is not what the request compiles to.
    assert failed(pod) == {
        "secureml.wholeGpuCount",
        "secureml.gpuCount",
        "secureml.gpuMatchesRequest",
    }


SINGLE = {"secureml.migProfile.single"}
MATCH = {"secureml.gpuMatchesRequest"}
COUNT = {"secureml.gpuCount"}


@pytest.mark.parametrize(
    ("name", "node_selector", "affinity", "expected"),
    [
        ("no product constraint", None, None, SINGLE),
        ("whole-GPU product", {PRODUCT: "NVIDIA-A100-SXM4-80GB"}, None, SINGLE),
        (
            "MIG product of a profile not allowed",
            {PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-7g.80gb"},
            None,
            SINGLE,
        ),
        (
            "MIG product of a model not allowed",
            {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb"},
            None,
            SINGLE,
        ),
        ("suffix on an unknown product", {PRODUCT: "ACME-FAKE-MIG-1g.10gb"}, None, SINGLE),
        ("another label only", {"nvidia.com/gpu.count": "1"}, None, SINGLE),
        (
            "affinity with a whole-GPU product",
            None,
            required([product_in([*PRODUCTS_1G, "NVIDIA-H100-PCIe"])]),
            SINGLE,
        ),
        (
            "affinity NotIn",
            None,
            required([product_in(["NVIDIA-A100-SXM4-80GB"], "NotIn")]),
            SINGLE,
        ),
        ("affinity Exists", None, required([{"key": PRODUCT, "operator": "Exists"}]), SINGLE),
        (
            "second term allows any node",
            None,
            required(
                [product_in(PRODUCTS_1G)],
                [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
            ),
            SINGLE,
        ),
        (
            "second term NotIn",
            None,
            required([product_in(PRODUCTS_1G)], [product_in(["NVIDIA-A100-SXM4-80GB"], "NotIn")]),
            SINGLE,
        ),
        (
            "In beside NotIn on the product key",
            None,
            required(
                [product_in(PRODUCTS_1G), product_in(["NVIDIA-H100-PCIe-MIG-1g.10gb"], "NotIn")]
            ),
            SINGLE,
        ),
        (
            "empty terms",
            None,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                }
            },
            SINGLE,
        ),
        (
            "preferred only",
            None,
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [product_in(PRODUCTS_1G)]}}
                    ]
                }
            },
            SINGLE,
        ),
        # Allowed: every term pins the product; other keys only narrow a term (ANDed).
        (
            "two pinned terms",
            None,
            required([product_in(PRODUCTS_1G[:2])], [product_in(PRODUCTS_1G[2:])]),
            set(),
        ),
        (
            "pinned term with another key",
            None,
            required(
                [
                    product_in(PRODUCTS_1G),
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                ]
            ),
            set(),
        ),
        (
            "selector pins, affinity says anything",
            {PRODUCT: PRODUCTS_1G[0]},
            required([{"key": PRODUCT, "operator": "Exists"}]),
            set(),
        ),
    ],
)
@pytest.mark.parametrize("whole_gpu", [True, False])
def test_mig_pod_product_constraint(
    name: str,
    node_selector: dict | None,
    affinity: dict | None,
    expected: set[str],
    whole_gpu: bool,
) -> None:
    pod = mig_pod()
    if node_selector is not None:
        pod["spec"]["nodeSelector"] = node_selector
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    assert failed(pod, whole_gpu) == expected, name


def test_message_names_the_product_constraint() -> None:
    pod = mig_pod()
    pod["spec"]["nodeSelector"] = {PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    (violation,) = evaluate(admitted(pod, WITH_WHOLE), RULES[True])
    assert violation.what.startswith(
        f"MIG pod (strategy single) must pin {PRODUCT} by a nodeSelector"
    )
    assert all(product in violation.what for product in PRODUCTS_1G)


@pytest.mark.parametrize(
    ("label", "selector", "whole_expected", "mig_only_expected"),
    [
        # A whole GPU on the dedicated pool: allowed where the profile grants whole GPUs (without
        # them, nvidia.com/gpu off a `mig` pod has no per-step allowance: gpuCount, and no
        # request is a whole GPU: gpuMatchesRequest).
        ("dedicated", POOL, set(), SINGLE | COUNT | MATCH),
        # Whole-GPU label without the pool: dedicatedPool (and, without whole GPUs, single).
        ("dedicated", {}, {"secureml.dedicatedPool"}, SINGLE | COUNT | MATCH),
        # The MIG label does not need the dedicated pool, but does need a MIG product.
        ("mig", POOL, SINGLE, SINGLE),
        # A label that lies: not `mig`, so nvidia.com/gpu is taken for whole GPUs, off the pool;
        # and the request (MIG) is not what a `none` pod compiles to.
        (
            "none",
            {PRODUCT: PRODUCTS_1G[0]},
            {
                "secureml.isolationMatchesGpu",
                "secureml.migProfile.single",
                "secureml.dedicatedPool",
            }
            | MATCH,
            {"secureml.isolationMatchesGpu", "secureml.migProfile.single"} | COUNT | MATCH,
        ),
    ],
)
def test_isolation_label_tells_mig_from_whole(
    label: str, selector: dict, whole_expected: set[str], mig_only_expected: set[str]
) -> None:
    pod = mig_pod()
    if label == "dedicated":
        with_request(pod, WholeGPU(1))
    pod["metadata"]["labels"]["secureml.dev/isolation"] = label
    pod["spec"]["nodeSelector"] = dict(selector)
    assert failed(pod, whole_gpu=True) == whole_expected
    assert failed(pod, whole_gpu=False) == mig_only_expected


def test_mixed_strategy_is_unchanged() -> None:
    """On team-a (mixed) nvidia.com/gpu on a `mig` pod is still refused: MIG is nvidia.com/mig-*."""
    pod = mig_pod()
    pod["spec"]["nodeSelector"] = {PRODUCT: PRODUCTS_1G[0]}
    team_a = yaml.safe_load((PROFILES_DIR / "team-a.yaml").read_text())
    profile = TenantProfile.from_dict(team_a, source="team-a")
    rules = rules_for_profile(profile)
    assert {v.rule for v in evaluate(admitted(pod, profile), rules)} - PLACEMENT == {
        "secureml.isolationMatchesGpu",
        "secureml.dedicatedPool",
        "secureml.gpuMatchesRequest",  # a MIG request is nvidia.com/mig-1g.10gb there
    }
