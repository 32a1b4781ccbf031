"""The Pod Argo Workflows v4.0.5's controller creates for one pod template of a KFP workflow.

The sources it is modelled on, and what it leaves out: docs/architecture.md (`pods/`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from secureml.core import contract
from secureml.core.jsontree import copy_json

ARGO_VERSION = "v4.0.5"
ARGOEXEC_IMAGE = f"{contract.ARGOEXEC_REPOSITORY}:{ARGO_VERSION}"
# `getExecutorLogOpts` with the workflow controller's default flags.
ARGO_LOG_FLAGS = ("--loglevel", "info", "--log-format", "text", "--gloglevel", "0")
VAR_RUN_ARGO = "var-run-argo"
TMP_DIR_ARGO = "tmp-dir-argo"
MAIN_FILESYSTEM_DIR = "/mainctrfs"  # where `wait` sees main's mounts (ExecutorMainFilesystemDir)
PROGRESS_FILE = f"{contract.ARGO_VAR_RUN_DIR}/progress"
NO_DEADLINE = "0001-01-01T00:00:00Z"  # Go's zero time, RFC 3339: the workflow has no deadline
# The workflow-controller-configmap `executor` KFP 2.17.0 installs.
EXECUTOR_PULL_POLICY = "IfNotPresent"
EXECUTOR_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class Workflow:
    """What Argo reads from the Workflow object for every pod."""

    name: str
    namespace: str
    uid: str
    service_account: str
    pod_labels: dict[str, str] = field(default_factory=dict)  # spec.podMetadata
    pod_annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Template:
    """One pod template (a container template of the compiled workflow).

    `patch` is the template's podSpecPatch as a PodSpec fragment (KFP's driver fills it in at run
    time); only the fields KFP's driver sets are merged (see `_merge_patch`).
    """

    name: str
    main: dict[str, Any]
    init_containers: tuple[dict[str, Any], ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()
    security_context: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    patch: dict[str, Any] = field(default_factory=dict)


def fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def node_id(workflow: Workflow, node_name: str) -> str:
    return workflow.name if node_name == workflow.name else f"{workflow.name}-{fnv32a(node_name)}"


def pod_name(workflow: Workflow, node_name: str, template: str) -> str:
    """Pod names v2 (the default): `<workflow>-<template>-<fnv32a(node name)>`."""
    if node_name == workflow.name:
        return workflow.name
    return f"{f'{workflow.name}-{template}'[:242]}-{fnv32a(node_name)}"


def argo_pod(workflow: Workflow, node_name: str, template: Template) -> dict[str, Any]:
    """The Pod Argo creates for `template` at node `node_name` (a new dict)."""
    nid = node_id(workflow, node_name)
    main = copy_json(template.main)
    main["name"] = contract.KFP_MAIN_CONTAINER
    wait = _executor_container(contract.ARGO_WAIT_CONTAINER, workflow)
    # Output artifacts are read from main's mounts, mirrored into `wait` (before the patch).
    wait["volumeMounts"] = [
        {
            **{k: v for k, v in m.items() if k != "readOnly"},
            "mountPath": MAIN_FILESYSTEM_DIR + m["mountPath"],
        }
        for m in main.get("volumeMounts", [])
    ]
    init = _executor_container(contract.ARGO_INIT_CONTAINER, workflow)
    init_containers = [init, *copy_json(list(template.init_containers))]
    containers = [wait, main]
    volumes = [
        {"name": VAR_RUN_ARGO, "emptyDir": {}},
        {"name": TMP_DIR_ARGO, "emptyDir": {}},
        *copy_json(list(template.volumes)),
    ]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": workflow.service_account,
        "initContainers": init_containers,
        "containers": containers,
        "volumes": volumes,
    }
    if template.security_context is not None:
        spec["securityContext"] = copy_json(template.security_context)
    for container in init_containers:
        container.setdefault("volumeMounts", []).append(_var_run_argo_mount())
    for container in init_containers:
        container.setdefault("env", []).extend(
            [
                {"name": "ARGO_CONTAINER_NAME", "value": container["name"]},
                {"name": "ARGO_TEMPLATE", "value": json.dumps({"name": template.name})},
                *_node_env(nid),
            ]
        )
    for container in containers:
        container.setdefault("env", []).extend(
            [{"name": "ARGO_CONTAINER_NAME", "value": container["name"]}, *_node_env(nid)]
        )
    _merge_patch(spec, template.patch)
    for index, container in enumerate(spec["containers"]):
        if container["name"] != contract.ARGO_WAIT_CONTAINER:
            container["command"] = [*emissary_prefix(), *container.get("command", [])]
        if container.get("image") == ARGOEXEC_IMAGE:
            container["volumeMounts"].append(
                {"name": TMP_DIR_ARGO, "mountPath": "/tmp", "subPath": str(index)}
            )
        container.setdefault("volumeMounts", []).append(_var_run_argo_mount())
    labels = {
        "workflows.argoproj.io/workflow": workflow.name,
        "workflows.argoproj.io/completed": "false",
        **workflow.pod_labels,
        **template.labels,
    }
    annotations = {
        "workflows.argoproj.io/node-name": node_name,
        "workflows.argoproj.io/node-id": nid,
        "kubectl.kubernetes.io/default-container": contract.KFP_MAIN_CONTAINER,
        **workflow.pod_annotations,
        **template.annotations,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(workflow, node_name, template.name),
            "namespace": workflow.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def emissary_prefix() -> list[str]:
    """What Argo puts before the command of every container but `wait`."""
    return [contract.ARGO_EXECUTOR_BINARY, "emissary", *ARGO_LOG_FLAGS, "--"]


def _executor_container(name: str, workflow: Workflow) -> dict[str, Any]:
    return {
        "name": name,
        "image": ARGOEXEC_IMAGE,
        "imagePullPolicy": EXECUTOR_PULL_POLICY,
        "command": ["argoexec", name, *ARGO_LOG_FLAGS],
        "env": [
            {
                "name": "ARGO_POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "ARGO_POD_UID",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}},
            },
            {"name": "ARGO_WORKFLOW_NAME", "value": workflow.name},
            {"name": "ARGO_WORKFLOW_UID", "value": workflow.uid},
            # `addArtifactPlugins`: the wait container's artifact plugins (none; the empty value
            # is left out of the stored pod)
            *(
                [{"name": "ARGO_ARTIFACT_PLUGIN_NAMES"}]
                if name == contract.ARGO_WAIT_CONTAINER
                else []
            ),
        ],
        "resources": {},
        "securityContext": copy_json(EXECUTOR_SECURITY_CONTEXT),
    }


def _node_env(nid: str) -> list[dict[str, Any]]:
    # Progress reporting is on by default (patch tick 1m, file tick 3s).
    return [
        {"name": "ARGO_NODE_ID", "value": nid},
        {"name": "ARGO_INCLUDE_SCRIPT_OUTPUT", "value": "false"},
        {"name": "ARGO_DEADLINE", "value": NO_DEADLINE},
        {"name": "ARGO_PROGRESS_FILE", "value": PROGRESS_FILE},
        {"name": "ARGO_PROGRESS_PATCH_TICK_DURATION", "value": "1m0s"},
        {"name": "ARGO_PROGRESS_FILE_TICK_DURATION", "value": "3s"},
    ]


def _var_run_argo_mount() -> dict[str, Any]:
    return {"name": VAR_RUN_ARGO, "mountPath": contract.ARGO_VAR_RUN_DIR}


def _merge_patch(spec: dict[str, Any], patch: dict[str, Any]) -> None:
    """Kubernetes' strategic merge of a PodSpec patch, for the fields KFP's driver sets.

    Containers merge by name, env and volumes by name, volume mounts by mount path (new items go
    last); resources, security context and node selector merge as maps; command, args, image,
    tolerations, affinity and the rest are replaced.
    """
    for key, value in patch.items():
        if key == "containers":
            for item in value:
                target = next((c for c in spec["containers"] if c["name"] == item["name"]), None)
                if target is None:
                    spec["containers"].append(copy_json(item))
                else:
                    _merge_container(target, item)
        elif key in ("volumes", "imagePullSecrets"):
            _merge_list(spec.setdefault(key, []), value, "name")
        elif key == "nodeSelector":
            spec.setdefault(key, {}).update(value)
        else:
            spec[key] = copy_json(value)


def _merge_container(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if key == "env":
            _merge_list(target.setdefault(key, []), value, "name")
        elif key == "volumeMounts":
            _merge_list(target.setdefault(key, []), value, "mountPath")
        elif key == "resources":
            for kind, amounts in value.items():
                target.setdefault(key, {}).setdefault(kind, {}).update(amounts)
        elif key == "securityContext":
            target.setdefault(key, {}).update(copy_json(value))
        else:
            target[key] = copy_json(value)


def _merge_list(target: list[dict[str, Any]], items: list[dict[str, Any]], key: str) -> None:
    """A list merged by `key` as Kubernetes' strategic merge orders it (k8s.io/apimachinery
    `strategicpatch`: `mergeSlice`, `normalizeElementOrder`, `mergeSortedSlice`): each patch item
    merged into the entry of `target` with its key (or new), the patch's items in the patch's
    order, and the entries the patch does not name inserted among them where `target` had them
    before an item the patch names, else after. So a patch's new items come before the entries
    Argo added (KFP's env before Argo's `ARGO_*`, the step's volumes before `var-run-argo`), as
    the real controller's pods show (tests/e2e/test_argo_run.py)."""
    order = {entry.get(key): position for position, entry in reversed(list(enumerate(target)))}
    patched: dict[Any, dict[str, Any]] = {}
    for item in items:
        base = patched.get(item.get(key))
        if base is None and item.get(key) in order:
            base = target[order[item.get(key)]]
        patched[item.get(key)] = {**(base or {}), **copy_json(item)}
    merged_into = {order[name] for name in patched if name in order}  # the first of a key only
    server_only = [entry for index, entry in enumerate(target) if index not in merged_into]
    patch_items = list(patched.values())
    merged: list[dict[str, Any]] = []
    left = right = 0
    while left < len(server_only) or right < len(patch_items):
        if right >= len(patch_items) or (
            left < len(server_only)
            and patch_items[right].get(key) in order
            and order[server_only[left].get(key)] < order[patch_items[right].get(key)]
        ):
            merged.append(server_only[left])
            left += 1
        else:
            merged.append(patch_items[right])
            right += 1
    target[:] = merged
