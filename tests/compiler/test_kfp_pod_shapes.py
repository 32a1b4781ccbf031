"""The preview builds the pods KFP 2.17.0 and Argo v4.0.5 really create (docs/admission-rules.md,
"KFP and Argo pod shapes"): Argo's init/wait containers and emissary, KFP's launcher copy step and
launcher command, the scratch emptyDirs, Argo's env, labels and names, and the driver pods."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.pods.argo import ARGO_LOG_FLAGS, ARGOEXEC_IMAGE, fnv32a
from secureml.pods.preview import (
    KFP_DRIVER_IMAGE,
    KFP_LAUNCHER_FLAGS,
    KFP_LAUNCHER_IMAGE,
    preview_driver_pods,
    preview_pods,
)
from tests.support.compiled import docs
from tests.support.paths import REPO
from tests.support.profiles import make_profile

REFERENCE = REPO / "pipelines" / "secure_finetune.py"
LOG = list(ARGO_LOG_FLAGS)
EMISSARY = ["/var/run/argo/argoexec", "emissary", *LOG, "--"]
SCRATCH = {
    "kfp-launcher": "/kfp-launcher",
    "gcs-scratch": "/gcs",
    "s3-scratch": "/s3",
    "minio-scratch": "/minio",
    "dot-local-scratch": "/.local",
    "dot-cache-scratch": "/.cache",
    "dot-config-scratch": "/.config",
}
ARGO_NODE_ENV = {
    "ARGO_CONTAINER_NAME",
    "ARGO_NODE_ID",
    "ARGO_INCLUDE_SCRIPT_OUTPUT",
    "ARGO_DEADLINE",
    "ARGO_PROGRESS_FILE",
    "ARGO_PROGRESS_PATCH_TICK_DURATION",
    "ARGO_PROGRESS_FILE_TICK_DURATION",
}
ARGO_EXECUTOR_ENV = {"ARGO_POD_NAME", "ARGO_POD_UID", "ARGO_WORKFLOW_NAME", "ARGO_WORKFLOW_UID"}


@pytest.fixture(scope="module")
def compiled() -> list[dict[str, Any]]:
    return docs(compile_pipeline(load_pipeline(REFERENCE), make_profile()).yaml_text)


@pytest.fixture(scope="module")
def pods(compiled: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return preview_pods(compiled, make_profile())


@pytest.fixture(scope="module")
def drivers(compiled: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return preview_driver_pods(compiled, make_profile())


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def env_names(container: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container.get("env", [])}


def mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


def test_executor_pod_containers_in_argos_order(pods: dict[str, dict[str, Any]]) -> None:
    for task, pod in pods.items():
        spec = pod["spec"]
        # the platform runtime's init container first (team-a names runtime.image), then Argo's
        names = [c["name"] for c in spec["initContainers"]]
        assert names == [contract.RUNTIME_INIT_CONTAINER, "init", "kfp-launcher"], task
        assert [c["name"] for c in spec["containers"]] == ["wait", "main"], task
        _, init, launcher = spec["initContainers"]
        wait = spec["containers"][0]
        assert init["image"] == wait["image"] == ARGOEXEC_IMAGE
        assert init["command"] == ["argoexec", "init", *LOG] and "args" not in init
        assert wait["command"] == ["argoexec", "wait", *LOG] and "args" not in wait
        assert launcher["image"] == KFP_LAUNCHER_IMAGE == "ghcr.io/kubeflow/kfp-launcher:2.17.0"
        assert launcher["command"] == ["launcher-v2"]
        assert launcher["args"] == [
            "--copy",
            "/kfp-launcher/launch",
            "--log_level",
            "1",
            "--publish_logs",
            "true",
        ]
        assert launcher["resources"] == {
            "limits": {"cpu": "500m", "memory": "256Mi"},
            "requests": {"cpu": "100m"},
        }


def test_main_argv_is_emissary_then_kfp_launcher_then_secureml_launcher(
    pods: dict[str, dict[str, Any]],
) -> None:
    for task, pod in pods.items():
        main = containers(pod)["main"]
        command = main["command"]
        assert command[: len(EMISSARY)] == EMISSARY, task
        kfp = command[len(EMISSARY) :]
        assert kfp[0] == "/kfp-launcher/launch" and kfp[-1] == "--"
        flags = kfp[1:-1:2]
        assert flags == [*KFP_LAUNCHER_FLAGS, "--publish_logs"]
        values = dict(zip(kfp[1:-1:2], kfp[2:-1:2], strict=True))
        assert values["--pipeline_name"] == "secure-finetune"
        assert values["--pod_name"] == "$(KFP_POD_NAME)" and values["--pod_uid"] == "$(KFP_POD_UID)"
        assert values["--mlmd_server_port"] == "8080" and values["--publish_logs"] == "true"
        assert main["args"][:2] == list(contract.RUNTIME_LAUNCHER_PREFIX)  # team-a: runtime.image
        assert len(main["args"]) > 2  # the step's own command follows ours


def test_executor_pod_volumes_mounts_and_env(pods: dict[str, dict[str, Any]]) -> None:
    for task, pod in pods.items():
        spec = pod["spec"]
        empty = {v["name"] for v in spec["volumes"] if v.get("emptyDir") == {}}
        assert {"var-run-argo", "tmp-dir-argo", *SCRATCH} <= empty, task
        by_name = containers(pod)
        for name, container in by_name.items():
            if name == contract.RUNTIME_INIT_CONTAINER:  # the platform's, not Argo's
                continue
            assert mounts(container)["/var/run/argo"] == "var-run-argo", (task, name)
            assert ARGO_NODE_ENV <= env_names(container), (task, name)
        for name in ("init", "kfp-launcher"):
            assert "ARGO_TEMPLATE" in env_names(by_name[name])
        for name in ("init", "wait"):
            assert ARGO_EXECUTOR_ENV <= env_names(by_name[name])
        main, wait = by_name["main"], by_name["wait"]
        assert {path: mounts(main)[path] for path in SCRATCH.values()} == {
            path: name for name, path in SCRATCH.items()
        }
        tmp = next(m for m in wait["volumeMounts"] if m["mountPath"] == "/tmp")
        assert tmp == {"name": "tmp-dir-argo", "mountPath": "/tmp", "subPath": "0"}
        assert {f"/mainctrfs{path}" for path in SCRATCH.values()} <= set(mounts(wait))
        assert {"KFP_POD_NAME", "KFP_POD_UID", "ARGO_CONTAINER_NAME"} <= env_names(main)
        assert main["envFrom"] == [
            {"configMapRef": {"name": contract.KFP_METADATA_CONFIGMAP, "optional": True}}
        ]
        assert [e["value"] for e in main["env"] if e["name"] == "ARGO_CONTAINER_NAME"] == ["main"]


def test_security_contexts_as_kfp_and_its_argo_configuration_set_them(
    pods: dict[str, dict[str, Any]],
) -> None:
    for pod in pods.values():
        by_name = containers(pod)
        for name in ("init", "wait"):
            security = by_name[name]["securityContext"]
            assert security["runAsUser"] == 65532 and security["runAsNonRoot"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert by_name[name]["imagePullPolicy"] == "IfNotPresent"
        assert by_name["kfp-launcher"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["spec"]["serviceAccountName"] == "secureml-pipeline-runner"


def test_metadata_and_names_follow_argo_and_kfp(pods: dict[str, dict[str, Any]]) -> None:
    names = [pod["metadata"]["name"] for pod in pods.values()]
    assert len(set(names)) == len(names)
    pod = pods["train"]
    labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    workflow = labels["workflows.argoproj.io/workflow"]
    assert workflow.startswith("secure-finetune-")
    assert labels["workflows.argoproj.io/completed"] == "false"
    assert labels["pipelines.kubeflow.org/v2_component"] == "true" and labels["pipeline/runid"]
    assert labels[contract.LABEL_STEP] == "train"  # the task's own pod labels are kept
    node = annotations["workflows.argoproj.io/node-name"]
    assert node == f"{workflow}.root.train.executor"
    assert annotations["workflows.argoproj.io/node-id"] == f"{workflow}-{fnv32a(node)}"
    assert annotations["kubectl.kubernetes.io/default-container"] == "main"
    assert annotations["pipelines.kubeflow.org/runtime-role"] == "launcher"
    assert annotations["sidecar.istio.io/inject"] == "false"
    # Argo's pod names v2: <workflow>-<template>-<fnv32a(node name)>; KFP's template name counts
    # the task's pod annotations and labels.
    template = r"metadata-\d+-\d+-system-container-impl"
    assert re.fullmatch(f"{workflow}-{template}-{fnv32a(node)}", pod["metadata"]["name"])


def test_fnv32a_is_gos_hash_fnv_new32a() -> None:
    assert fnv32a("") == 0x811C9DC5 and fnv32a("a") == 0xE40C292C
    assert fnv32a("foobar") == 0xBF9CF968


def test_driver_pods(drivers: dict[str, dict[str, Any]]) -> None:
    assert list(drivers) == ["root-driver", "evaluate-driver", "prep-driver", "train-driver"]
    for key, pod in drivers.items():
        spec = pod["spec"]
        assert [c["name"] for c in spec["initContainers"]] == ["init"], key
        assert [c["name"] for c in spec["containers"]] == ["wait", "main"], key
        main = spec["containers"][1]
        assert main["image"] == KFP_DRIVER_IMAGE == "ghcr.io/kubeflow/kfp-driver:2.17.0"
        assert main["command"] == [*EMISSARY, "driver"]
        kind = "ROOT_DAG" if key == "root-driver" else "CONTAINER"
        assert main["args"][:2] == ["--type", kind]
        assert main["resources"] == {
            "limits": {"cpu": "500m", "memory": "512Mi"},
            "requests": {"cpu": "100m", "memory": "64Mi"},
        }
        assert spec["securityContext"] == {
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsNonRoot": True,
        }
        assert main["securityContext"]["runAsNonRoot"] is True
        labels = pod["metadata"]["labels"]
        assert not [k for k in labels if k.startswith("secureml.dev/")]
        assert pod["metadata"]["annotations"]["pipelines.kubeflow.org/runtime-role"] == "driver"
    assert drivers["train-driver"]["metadata"]["annotations"][
        "workflows.argoproj.io/node-name"
    ].endswith(".root.train-driver")


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_every_previewed_pod_is_a_valid_pod(
    pods: dict[str, dict[str, Any]], drivers: dict[str, dict[str, Any]], version: str
) -> None:
    for pod in [*pods.values(), *drivers.values()]:
        kubernetes_validate.validate(pod, version, strict=True)


def test_patch_lists_merge_by_key_in_kubernetes_strategic_merge_order() -> None:
    """As k8s.io/apimachinery's strategic merge orders a list merged by key, which the real
    controller's pods show (tests/e2e/test_argo_run.py): the patch's items in its order, each
    merged into the first entry of its key; the entries it does not name inserted before the
    first patch item that came after them, else after."""
    from secureml.pods.argo import _merge_list

    # KFP's env in the template, Argo's added, then the driver's patch: KFP's first, Argo's last
    target = [{"name": "KFP_POD_NAME"}, {"name": "KFP_POD_UID"}, {"name": "ARGO_NODE_ID"}]
    items = [{"name": "KFP_POD_NAME", "value": "x"}, {"name": "KFP_POD_UID"}, {"name": "S"}]
    _merge_list(target, items, "name")
    assert [e["name"] for e in target] == ["KFP_POD_NAME", "KFP_POD_UID", "S", "ARGO_NODE_ID"]
    assert target[0] == {"name": "KFP_POD_NAME", "value": "x"}
    # a new item only: before everything the patch does not name
    volumes = [{"name": "var-run-argo"}, {"name": "kfp-launcher"}]
    _merge_list(volumes, [{"name": "scratch-tmp", "emptyDir": {}}], "name")
    assert [v["name"] for v in volumes] == ["scratch-tmp", "var-run-argo", "kfp-launcher"]
    # interleaved: D after B (the patch's order), C where it was, after B
    target = [{"name": "A"}, {"name": "B", "value": "1"}, {"name": "C"}]
    items = [{"name": "B", "extra": "2"}, {"name": "D"}, {"name": "D", "more": "3"}]
    _merge_list(target, items, "name")
    assert target == [
        {"name": "A"},
        {"name": "B", "value": "1", "extra": "2"},
        {"name": "D", "more": "3"},
        {"name": "C"},
    ]
    # a key twice in the target: the first merged, the second kept
    target = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    _merge_list(target, [{"name": "A", "value": "new"}], "name")
    assert target == [{"name": "A", "value": "new"}, {"name": "A", "value": "2"}]
    items = [{"name": "E", "value": "4"}]
    _merge_list(target, items, "name")
    items[0]["value"] = "changed"
    assert target[0]["value"] == "4"  # no dict of the patch is shared with the pod
