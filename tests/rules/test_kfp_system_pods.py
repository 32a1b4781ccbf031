"""KFP's own pods in the tenant namespace (secureml.rules.scope): Pod Security and the pod rules
hold for every pod; the step rules hold for every pod but a KFP system pod (only KFP/Argo images,
matched by repository on whole path segments, and no GPU). Exact verdicts, through the real engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from secureml import contract
from secureml.compiler import compile_pipeline
from secureml.pipeline_loader import load_pipeline
from secureml.preview import KFP_LAUNCHER_IMAGE, preview_pods
from secureml.rules import evaluate, in_scope, rules_for_level, rules_for_profile
from secureml.rules.scope import KFP_SYSTEM_POD, STEP_POD
from tests.rules.conftest import ATTACKS_DIR, EXAMPLE_PROFILES, REPO, example_profile

ALLOWED = ATTACKS_DIR.parent / "allowed"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ARGOEXEC = f"quay.io/argoproj/argoexec:v3.7.3@{DIGEST}"
# What the platform team configures for Argo's executor containers (workflow-controller-configmap
# `executor.securityContext`): Argo runs them as root by default, which Pod Security refuses.
ARGO_EXECUTOR_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 8737,
}


def driver_pod() -> dict[str, Any]:
    return yaml.safe_load((ALLOWED / "kfp-driver.yaml").read_text())


def failed(pod: dict[str, Any], profile: str = "team-a") -> set[str]:
    return {v.rule_id for v in evaluate(pod, rules_for_profile(example_profile(profile)))}


def attack(name: str) -> dict[str, Any]:
    return yaml.safe_load((ATTACKS_DIR / f"{name}.yaml").read_text())


# --- which pods are KFP system pods ---------------------------------------------------------------


@pytest.mark.parametrize("profile_name", EXAMPLE_PROFILES)
def test_driver_pod_is_a_system_pod_and_allowed(profile_name: str) -> None:
    pod = driver_pod()
    assert in_scope(pod, KFP_SYSTEM_POD) is True
    assert in_scope(pod, STEP_POD) is False
    assert failed(pod, profile_name) == set()
    assert evaluate(pod, rules_for_level("restricted")) == []


@pytest.mark.parametrize(
    ("image", "system"),
    [
        ("ghcr.io/kubeflow/kfp-driver", True),
        ("ghcr.io/kubeflow/kfp-driver:2.16.0", True),
        (f"ghcr.io/kubeflow/kfp-driver@{DIGEST}", True),
        (f"ghcr.io/kubeflow/kfp-driver:2.16.0@{DIGEST}", True),
        ("ghcr.io/kubeflow/kfp-launcher:2.16.0", True),
        ("quay.io/argoproj/argoexec:v3.7.3", True),
        ("ghcr.io/kubeflow/kfp-driver-debug:2.16.0", False),  # whole path segments
        ("ghcr.io/kubeflow/kfp-driver/shell:latest", False),
        ("evil.io/ghcr.io/kubeflow/kfp-driver:2.16.0", False),
        ("docker.io/kubeflow/kfp-driver:2.16.0", False),
        ("GHCR.IO/kubeflow/kfp-driver:2.16.0", False),
        ("ghcr.io/kubeflow/kfp-driver.evil.io/x:1", False),
        ("ghcr.io/kubeflow/kfp-drive:2.16.0", False),
        (f"ghcr.io/acme/ml-images/train@{DIGEST}", False),
    ],
)
def test_system_image_is_matched_by_repository_on_whole_segments(image: str, system: bool) -> None:
    pod = driver_pod()
    pod["spec"]["containers"][1]["image"] = image
    assert in_scope(pod, KFP_SYSTEM_POD) is system


@pytest.mark.parametrize("field", ["containers", "initContainers", "ephemeralContainers"])
def test_one_foreign_image_in_any_container_list_makes_a_step_pod(field: str) -> None:
    pod = driver_pod()
    foreign = {"name": "x", "image": f"ghcr.io/acme/ml-images/train@{DIGEST}"}
    pod["spec"].setdefault(field, []).append(foreign)
    assert in_scope(pod, STEP_POD) is True
    pod["spec"][field][-1]["image"] = ARGOEXEC
    assert in_scope(pod, STEP_POD) is False


@pytest.mark.parametrize(
    ("resource", "system"),
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("nvidia.com/gpu", False),
        ("nvidia.com/gpu.shared", False),
        ("nvidia.com/mig-1g.10gb", False),
        ("amd.com/gpu", False),
        ("gpu.intel.com/i915", False),
        ("hugepages-2Mi", False),
    ],
)
@pytest.mark.parametrize("where", ["limits", "requests"])
def test_only_native_resources_keep_a_system_pod(resource: str, system: bool, where: str) -> None:
    pod = driver_pod()
    pod["spec"]["initContainers"][0]["resources"] = {where: {resource: "1"}}
    assert in_scope(pod, KFP_SYSTEM_POD) is system


def test_a_resource_claim_makes_a_step_pod() -> None:
    pod = driver_pod()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "secureml-gpu-1"}]
    assert in_scope(pod, STEP_POD) is True
    pod["spec"]["resourceClaims"] = []
    assert in_scope(pod, STEP_POD) is False


# --- attacks: exact verdicts under team-a ----------------------------------------------------------

NO_STEP_LABELS = {
    "secureml.requiredLabels",
    "secureml.isolationLevel",
    "secureml.readOnlyRootFilesystem",
}
# A step pod without a GPU that does not keep off team-a's GPU pools (secureml.rules.placement).
OFF_GPU = {"secureml.gpuFreeOffGpuNodes"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # KFP's images beside an arbitrary one (from team-a's own registry, digest-pinned): a step pod.
        ("t18-kfp-driver-plus-arbitrary-image", NO_STEP_LABELS | OFF_GPU),
        ("t18-kfp-driver-ephemeral-container", NO_STEP_LABELS | OFF_GPU),
        # The driver image asking for a GPU: a step pod, and the GPU rules speak too.
        (
            "t18-kfp-driver-gpu",
            NO_STEP_LABELS
            | {"secureml.isolationMatchesGpu", "secureml.shimLimits", "secureml.gpuRequest"},
        ),
        ("t18-kfp-driver-mig-in-requests", NO_STEP_LABELS | {"secureml.isolationMatchesGpu"}),
        ("t18-kfp-driver-dra-claim", NO_STEP_LABELS | {"secureml.resourceClaims"}),
        # Look-alike repositories are neither system images nor tenant images.
        (
            "t18-kfp-driver-lookalike",
            NO_STEP_LABELS | OFF_GPU | {"secureml.imageRegistry", "secureml.imageDigest"},
        ),
        (
            "t18-kfp-driver-nested-repository",
            NO_STEP_LABELS | OFF_GPU | {"secureml.imageRegistry", "secureml.imageDigest"},
        ),
        # KFP system pods all the same: Pod Security and the pod rules still hold.
        ("t18-kfp-driver-hostpath", {"pss.restrictedVolumes"}),
        ("t18-kfp-driver-root", {"pss.runAsUser", "secureml.runAsNonRoot"}),
        ("t18-kfp-driver-nvidia-visible-devices", {"secureml.forbiddenEnv", "secureml.nvidiaEnv"}),
    ],
)
def test_kfp_attacks_exact_verdicts(name: str, expected: set[str]) -> None:
    assert failed(attack(name)) == expected


# --- a step pod: the preview's pod plus Argo's executor containers -----------------------------------


def with_argo_executor(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as Argo's emissary executor runs it: an `init` and a `wait` container (argoexec), the
    `main` command behind `argoexec emissary --`, and the shared `var-run-argo` volume."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    mount = {"name": "var-run-argo", "mountPath": "/var/run/argo"}
    spec["volumes"].append({"name": "var-run-argo", "emptyDir": {}})

    def executor(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": ARGOEXEC,
            "command": ["argoexec", name, "--loglevel", "info"],
            "env": [{"name": "ARGO_CONTAINER_NAME", "value": name}],
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "securityContext": copy.deepcopy(ARGO_EXECUTOR_SECURITY),
            "volumeMounts": [dict(mount)],
        }

    spec["initContainers"] = [executor("init"), *spec["initContainers"]]
    spec["containers"] = [executor("wait"), *spec["containers"]]
    main = next(c for c in spec["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    main["command"] = ["/var/run/argo/argoexec", "emissary", "--", *main["command"]]
    main["volumeMounts"].append(dict(mount))
    return pod


@pytest.fixture(scope="module")
def step_pods() -> dict[str, dict[str, Any]]:
    profile = example_profile("team-a")
    compiled = compile_pipeline(load_pipeline(REPO / "pipelines" / "secure_finetune.py"), profile)
    pods = preview_pods(list(yaml.safe_load_all(compiled.yaml_text)), profile)
    return {task: with_argo_executor(pod) for task, pod in pods.items()}


def test_step_pods_with_kfp_and_argo_containers_are_allowed(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    assert step_pods
    for task, pod in step_pods.items():
        images = [c["image"] for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]]
        assert images[:2] == [ARGOEXEC, KFP_LAUNCHER_IMAGE] and images[2] == ARGOEXEC, task
        assert in_scope(pod, STEP_POD) is True, task  # the step's own image makes it a step pod
        assert failed(pod) == set(), task
        assert evaluate(pod, rules_for_level("restricted")) == [], task


def test_system_containers_of_a_step_pod_pass_the_image_rules_by_repository(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """The launcher's image is tag-only (`:2.16.0`) in the preview; KFP's and Argo's images pass
    the digest rule by repository, the step's own image must be pinned."""
    pod = copy.deepcopy(next(iter(step_pods.values())))
    assert "@" not in KFP_LAUNCHER_IMAGE
    main = next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    main["image"] = main["image"].split("@")[0] + ":latest"
    (violation,) = [v for v in evaluate(pod, rules_for_profile(example_profile("team-a")))]
    assert violation.rule_id == "secureml.imageDigest"
    assert violation.message.startswith('container "main" ')


def test_argo_executor_without_a_security_context_is_refused(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """Argo runs its executor as root unless configured: Pod Security (every pod) refuses it."""
    pod = copy.deepcopy(next(iter(step_pods.values())))
    del pod["spec"]["containers"][0]["securityContext"]
    assert {v.rule_id for v in evaluate(pod, rules_for_level("restricted"))} == {
        "pss.allowPrivilegeEscalation",
        "pss.runAsNonRoot",
        "pss.capabilities_restricted.dropAll",
    }
