"""KFP's own pods in the tenant namespace (secureml.rules.scope): Pod Security and the pod rules
hold for every pod; the step rules hold for every pod but a KFP system pod (only KFP's and Argo's
own containers in their exact shape, images matched by repository on whole path segments, and no
GPU). The preview's KFP 2.17 / Argo v4.0.5 pods are admitted; impostors are not. Through the real
engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.pods.argo import ARGOEXEC_IMAGE
from secureml.pods.preview import KFP_LAUNCHER_IMAGE, preview_driver_pods, preview_pods
from secureml.rules import evaluate, in_scope, rules_for_level, rules_for_profile
from secureml.rules.scope import KFP_SYSTEM_POD, STEP_POD, system_container
from tests.support.paths import ATTACKS_DIR, REPO
from tests.support.profiles import EXAMPLE_PROFILES, example_profile

ALLOWED = ATTACKS_DIR.parent / "allowed"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ARGOEXEC = f"quay.io/argoproj/argoexec:v4.0.5@{DIGEST}"


def driver_pod() -> dict[str, Any]:
    return yaml.safe_load((ALLOWED / "kfp-driver.yaml").read_text())


def failed(pod: dict[str, Any], profile: str = "team-a") -> set[str]:
    return {v.rule for v in evaluate(pod, rules_for_profile(example_profile(profile)))}


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
        ("ghcr.io/kubeflow/kfp-driver:2.17.0", True),
        (f"ghcr.io/kubeflow/kfp-driver@{DIGEST}", True),
        (f"ghcr.io/kubeflow/kfp-driver:2.17.0@{DIGEST}", True),
        ("ghcr.io/kubeflow/kfp-launcher:2.17.0", False),  # a system image, not the driver's
        ("quay.io/argoproj/argoexec:v4.0.5", False),
        ("ghcr.io/kubeflow/kfp-driver-debug:2.17.0", False),  # whole path segments
        ("ghcr.io/kubeflow/kfp-driver/shell:latest", False),
        ("evil.io/ghcr.io/kubeflow/kfp-driver:2.17.0", False),
        ("docker.io/kubeflow/kfp-driver:2.17.0", False),
        ("GHCR.IO/kubeflow/kfp-driver:2.17.0", False),
        ("ghcr.io/kubeflow/kfp-driver.evil.io/x:1", False),
        ("ghcr.io/kubeflow/kfp-drive:2.17.0", False),
        (f"ghcr.io/acme/ml-images/train@{DIGEST}", False),
    ],
)
def test_system_image_is_matched_by_repository_on_whole_segments(image: str, system: bool) -> None:
    pod = driver_pod()
    pod["spec"]["containers"][1]["image"] = image
    assert in_scope(pod, KFP_SYSTEM_POD) is system


@pytest.mark.parametrize("field", ["containers", "initContainers", "ephemeralContainers"])
def test_one_foreign_container_in_any_container_list_makes_a_step_pod(field: str) -> None:
    pod = driver_pod()
    wait = copy.deepcopy(pod["spec"]["containers"][0])
    foreign = {**wait, "image": f"ghcr.io/acme/ml-images/train@{DIGEST}"}
    pod["spec"].setdefault(field, []).append(foreign)
    assert in_scope(pod, STEP_POD) is True
    pod["spec"][field][-1] = wait  # Argo's own `wait`, in its exact shape
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


# --- attacks: a step pod or not, and the rules that must speak (team-a) ----------------------------

NO_STEP_LABELS = {"secureml.requiredLabels", "secureml.isolationLevel"}


@pytest.mark.parametrize(
    ("name", "step", "expected"),
    [
        # KFP's containers beside a tenant image (team-a's own registry, digest-pinned): a step pod.
        ("t18-kfp-driver-plus-arbitrary-image", True, NO_STEP_LABELS),
        ("t18-kfp-driver-ephemeral-container", True, NO_STEP_LABELS),
        # The driver image asking for a GPU: a step pod, and the GPU rules speak too.
        (
            "t18-kfp-driver-gpu",
            True,
            NO_STEP_LABELS
            | {"secureml.isolationMatchesGpu", "secureml.shimLimits", "secureml.gpuRequest"},
        ),
        ("t18-kfp-driver-mig-in-requests", True, NO_STEP_LABELS | {"secureml.isolationMatchesGpu"}),
        ("t18-kfp-driver-dra-claim", True, NO_STEP_LABELS | {"secureml.resourceClaims"}),
        # Look-alike repositories are neither system containers nor tenant images.
        (
            "t18-kfp-driver-lookalike",
            True,
            NO_STEP_LABELS | {"secureml.imageRegistry", "secureml.imageDigest"},
        ),
        (
            "t18-kfp-driver-nested-repository",
            True,
            NO_STEP_LABELS | {"secureml.imageRegistry", "secureml.imageDigest"},
        ),
        # KFP system pods all the same: Pod Security and the pod rules still hold.
        ("t18-kfp-driver-hostpath", False, {"pss.restrictedVolumes"}),
        ("t18-kfp-driver-root", False, {"pss.runAsUser", "secureml.runAsNonRoot"}),
        ("t18-kfp-driver-nvidia-visible-devices", False, {"secureml.forbiddenEnv"}),
    ],
)
def test_kfp_attacks(name: str, step: bool, expected: set[str]) -> None:
    """Whether the pod is a step pod is exact; of the refusals, the ones these attacks are about
    (other rules may refuse the same pod for more)."""
    pod = attack(name)
    assert in_scope(pod, STEP_POD) is step
    assert expected <= failed(pod)
    if not step:
        assert not [r for r in failed(pod) if r in STEP_RULE_IDS]


STEP_RULE_IDS = {r.id for r in rules_for_profile(example_profile("team-a")) if r.scope == STEP_POD}


# --- the preview's pods: KFP 2.17 / Argo v4.0.5 shapes, admitted under every example profile ----


def compiled_docs(profile_name: str) -> list[dict[str, Any]] | None:
    profile = example_profile(profile_name)
    try:
        compiled = compile_pipeline(
            load_pipeline(REPO / "pipelines" / "secure_finetune.py"), profile
        )
    except CompileError:
        return None  # the profile forbids what the pipeline asks for (tested elsewhere)
    return list(yaml.safe_load_all(compiled.yaml_text))


@pytest.fixture(scope="module")
def step_pods() -> dict[str, dict[str, Any]]:
    docs = compiled_docs("team-a")
    assert docs is not None
    return preview_pods(docs, example_profile("team-a"))


@pytest.fixture(scope="module")
def driver_pods() -> dict[str, dict[str, Any]]:
    docs = compiled_docs("team-a")
    assert docs is not None
    return preview_driver_pods(docs, example_profile("team-a"))


def system_names(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    return [
        c["name"]
        for lst in ("initContainers", "containers")
        for c in spec.get(lst, [])
        if evaluate_system_container(c)
    ]


def evaluate_system_container(container: dict[str, Any]) -> bool:
    """`scope.system_container` on one container, through the real engine (in a one-container pod)."""
    pod = {"spec": {"containers": [container]}}
    return in_scope(pod, f"object.spec.containers.all(c, {system_container()})")


@pytest.mark.parametrize("profile_name", EXAMPLE_PROFILES)
def test_previewed_step_and_driver_pods_are_allowed(profile_name: str) -> None:
    docs = compiled_docs(profile_name)
    if docs is None:
        return
    profile = example_profile(profile_name)
    steps, drivers = preview_pods(docs, profile), preview_driver_pods(docs, profile)
    assert steps and drivers
    for task, pod in steps.items():
        assert in_scope(pod, STEP_POD) is True, task  # the step's own image makes it a step pod
        assert system_names(pod) == ["init", "kfp-launcher", "wait"], task
        assert failed(pod, profile_name) == set(), task
    for task, pod in drivers.items():
        assert in_scope(pod, KFP_SYSTEM_POD) is True, task
        assert system_names(pod) == ["init", "wait", "main"], task
        assert failed(pod, profile_name) == set(), task
        assert evaluate(pod, rules_for_level("restricted")) == [], task


def test_system_containers_of_a_step_pod_pass_the_image_rules_by_shape(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """KFP's and Argo's images are tag-only in the preview: they pass the digest rule as system
    containers; the step's own image must be pinned."""
    pod = copy.deepcopy(next(iter(step_pods.values())))
    assert "@" not in KFP_LAUNCHER_IMAGE and "@" not in ARGOEXEC_IMAGE
    main = next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    main["image"] = main["image"].split("@")[0] + ":latest"
    violations = [v for v in evaluate(pod, rules_for_profile(example_profile("team-a")))]
    digest = [v for v in violations if v.rule == "secureml.imageDigest"]
    assert len(digest) == 1 and digest[0].what.startswith('container "main" ')


def test_argo_executor_without_its_configured_security_context_is_refused(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """Argo runs its executor as root unless configured: Pod Security (every pod) refuses it."""
    pod = copy.deepcopy(next(iter(step_pods.values())))
    wait = pod["spec"]["containers"][0]
    assert wait["name"] == "wait"
    wait["securityContext"] = {"readOnlyRootFilesystem": True}
    assert {v.rule for v in evaluate(pod, rules_for_level("restricted"))} == {
        "pss.allowPrivilegeEscalation",
        "pss.runAsNonRoot",
        "pss.capabilities_restricted.dropAll",
    }


# --- system containers by exact shape; impostors -----------------------------------------------

TENANT_ARGOEXEC = f"ghcr.io/acme/ml-images/argoexec@{DIGEST}"  # team-a's registry, pinned
LOG = ["--loglevel", "info", "--log-format", "text", "--gloglevel", "0"]


def _wait() -> dict[str, Any]:
    return {"name": "wait", "image": ARGOEXEC, "command": ["argoexec", "wait", *LOG]}


def _launcher() -> dict[str, Any]:
    return {
        "name": "kfp-launcher",
        "image": KFP_LAUNCHER_IMAGE,
        "command": ["launcher-v2"],
        "args": ["--copy", "/kfp-launcher/launch", "--log_level", "1", "--publish_logs", "true"],
    }


def _driver() -> dict[str, Any]:
    return {
        "name": "main",
        "image": "ghcr.io/kubeflow/kfp-driver:2.17.0",
        "command": ["/var/run/argo/argoexec", "emissary", *LOG, "--", "driver"],
        "args": ["--type", "DAG"],
    }


@pytest.mark.parametrize(
    ("container", "system"),
    [
        (_wait(), True),
        ({**_wait(), "name": "init", "command": ["argoexec", "init", *LOG]}, True),
        (
            {
                **_wait(),
                "command": [
                    "argoexec",
                    "wait",
                    "--loglevel",
                    "debug",
                    "--log-format",
                    "json",
                    "--gloglevel",
                    "4",
                ],
            },
            True,
        ),  # fmt: skip
        (_launcher(), True),
        ({**_launcher(), "args": ["--copy", "/kfp-launcher/launch"]}, True),
        ({**_launcher(), "args": ["--copy", "/kfp-launcher/launch", "--cache_disabled"]}, True),
        (_driver(), True),
        # impostors: a tenant image named like Argo's, or a system image in another shape
        ({**_wait(), "image": TENANT_ARGOEXEC}, False),
        ({**_wait(), "image": "quay.io/argoproj/argoexec-debug:v4.0.5"}, False),
        ({**_wait(), "name": "sidecar"}, False),
        ({**_wait(), "command": ["argoexec", "init", *LOG]}, False),  # `wait` running init
        ({**_wait(), "command": ["argoexec", "emissary", *LOG, "--", "sh"]}, False),
        ({**_wait(), "command": ["argoexec", "wait", *LOG[:4]]}, False),
        ({**_wait(), "command": ["argoexec", "wait", *LOG[:5], "0; sh"]}, False),
        ({**_wait(), "args": ["--", "sh"]}, False),
        ({**_wait(), "command": None}, False),
        ({**_launcher(), "args": ["--copy", "/tmp/launch"]}, False),
        ({**_launcher(), "args": ["--copy", "/kfp-launcher/launch", "--", "sh"]}, False),
        ({**_launcher(), "command": ["sh", "-c"]}, False),
        ({**_launcher(), "image": ARGOEXEC}, False),
        ({**_driver(), "command": ["/var/run/argo/argoexec", "emissary", *LOG, "--", "sh"]}, False),
        ({**_driver(), "name": "wait"}, False),
        ({**_driver(), "image": f"ghcr.io/acme/ml-images/kfp-driver@{DIGEST}"}, False),
    ],
)
def test_system_container_shape(container: dict[str, Any], system: bool) -> None:
    container = {k: v for k, v in container.items() if v is not None}
    assert evaluate_system_container(container) is system


def test_a_tenant_wait_container_makes_a_driver_pod_a_step_pod_and_is_refused() -> None:
    """A container named `wait` with an argoexec-like image from the tenant's own registry is not
    Argo's: the pod is a step pod, refused for the step labels (and for its extra container)."""
    pod = driver_pod()
    pod["spec"]["containers"][0]["image"] = TENANT_ARGOEXEC
    assert in_scope(pod, STEP_POD) is True
    assert NO_STEP_LABELS <= failed(pod)


def test_argos_image_in_another_shape_is_refused_in_a_step_pod(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """Argo's real image running anything but its executor is neither a system container nor a
    tenant image: the image rules refuse it, naming it."""
    pod = copy.deepcopy(step_pods["train"])
    wait = pod["spec"]["containers"][0]
    wait["command"] = ["argoexec", "emissary", *LOG, "--", "/bin/sh", "-c", "id"]
    messages = {v.rule: v.what for v in evaluate(pod, rules_for_profile(example_profile("team-a")))}
    assert {"secureml.imageRegistry", "secureml.imageDigest"} <= set(messages)
    assert messages["secureml.imageRegistry"].startswith('container "wait" ')


def test_a_tenant_wait_container_in_a_step_pod_is_refused(
    step_pods: dict[str, dict[str, Any]],
) -> None:
    """The impostor `wait` (tenant's registry, Argo's command) beside a real step's `main`."""
    pod = copy.deepcopy(step_pods["train"])
    pod["spec"]["containers"][0]["image"] = TENANT_ARGOEXEC
    assert evaluate_system_container(pod["spec"]["containers"][0]) is False
    assert "secureml.tenantContainers" in failed(pod)


# --- KFP's envFrom import on main --------------------------------------------------------------

KFP_IMPORT = {"configMapRef": {"name": contract.KFP_METADATA_CONFIGMAP, "optional": True}}


@pytest.mark.parametrize(
    ("container", "env_from", "ok"),
    [
        ("main", KFP_IMPORT, True),
        ("main", {"configMapRef": {"name": contract.KFP_METADATA_CONFIGMAP}}, True),
        ("main", {"configMapRef": {"name": "other"}, "optional": True}, False),
        ("main", {"secretRef": {"name": contract.KFP_METADATA_CONFIGMAP}}, False),
        ("main", {**KFP_IMPORT, "secretRef": {"name": "s"}}, False),
        ("wait", KFP_IMPORT, False),
    ],
)
def test_only_kfps_own_import_goes_without_a_prefix(
    step_pods: dict[str, dict[str, Any]], container: str, env_from: dict[str, Any], ok: bool
) -> None:
    pod = copy.deepcopy(step_pods["train"])
    target = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    target["envFrom"] = [env_from]
    assert ("secureml.envFrom" not in failed(pod)) is ok
