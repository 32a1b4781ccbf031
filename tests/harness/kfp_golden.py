"""KFP's own 2.17.0 golden Workflows as the harness submits them to Argo, and their drivers' patches.

`adapt_golden` changes a golden only where a run on this harness must (`HARNESS_CHANGES` says which
fields and why); `golden_patches` is what the kfp-driver STAND-IN hands Argo for each task.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from secureml.core import contract
from secureml.pods import preview

from .kfp_workflow import (
    ISTIO_INJECT,
    PLACEHOLDERS,
    RUN_ID_LABEL,
    ApiServerSettings,
    go_json,
    run_metadata,
)

GOLDEN_VERSION = "2.17.0"
DRIVER_TEMPLATES = ("system-container-driver", "system-dag-driver")
# Every field the harness changes in a golden Workflow, and why. KFP's API server makes the same
# changes for a run of a 2.17.0 deployment (tests/harness/kfp_workflow.py `kfp_workflow`), except
# the fixed name, the namespace and the service account, which are the harness's tenant.
HARNESS_CHANGES = (
    ("metadata.generateName", "removed: a fixed metadata.name, so the test names its pods"),
    ("metadata.name", "the run's name (the preview's `<pipeline>-p7x2k`)"),
    ("metadata.namespace", "the e2e tenant's namespace, where the bundle is in force"),
    ("metadata.labels", "pipeline/runid: the run id (KFP's API server)"),
    ("metadata.annotations", "pipelines.kubeflow.org/run_name (KFP's API server)"),
    ("spec.serviceAccountName", "pipeline-runner -> secureml-pipeline-runner (the bundle's)"),
    ("spec.podMetadata.labels", "pipeline/runid on every pod (KFP's API server)"),
    ("spec.templates[*].metadata.annotations", "sidecar.istio.io/inject: false (API server)"),
    ("spec.templates[driver].container.image", ":latest -> kfp-driver:2.17.0, the STAND-IN "
     "mirrored in the session's registry (2.17.0's manifests pin the release)"),
    ("spec.templates[driver].container.args", "--run_display_name the run's name; "
     "--log_level 1 --publish_logs true (the 2.17.0 API server's deployment); "
     "{{workflow.uid}} -> the run id (API server)"),
    ("spec.templates[impl].initContainers[kfp-launcher].image", ":latest -> kfp-launcher:2.17.0, "
     "the STAND-IN mirrored in the session's registry"),
    ("spec.templates[impl].initContainers[kfp-launcher].args", "--log_level 1 --publish_logs true "
     "(the 2.17.0 API server's deployment)"),
    ("spec.templates[entrypoint].dag.tasks[root-driver].arguments.runtime-config",
     "the run's parameter values (a pipeline input without a default needs one)"),
    ("status", "removed: the compiler's empty status, which the API server prunes"),
)  # fmt: skip


def adapt_golden(
    golden: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    run_id: str,
    parameter_values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The golden Workflow with exactly `HARNESS_CHANGES` made (a new dict)."""
    workflow = copy.deepcopy(dict(golden))
    workflow.pop("status", None)
    workflow["metadata"] = run_metadata(name, namespace, run_id, name)
    spec = workflow["spec"]
    spec["serviceAccountName"] = contract.RUNNER_NAME
    spec["podMetadata"]["labels"][RUN_ID_LABEL] = run_id
    flags = ApiServerSettings().flags()
    for template in spec["templates"]:
        template.setdefault("metadata", {}).setdefault("annotations", {})[ISTIO_INJECT] = "false"
        if template["name"] in DRIVER_TEMPLATES:
            container = template["container"]
            container["image"] = preview.KFP_DRIVER_IMAGE
            args = container["args"]
            args[args.index("--run_display_name") + 1] = name
            args += flags
        for init in template.get("initContainers", []):
            if init["name"] == contract.KFP_LAUNCHER_CONTAINER:
                init["image"] = preview.KFP_LAUNCHER_IMAGE
                init["args"] += flags
        if template["name"] == "entrypoint" and parameter_values:
            (root,) = [t for t in template["dag"]["tasks"] if t["name"] == "root-driver"]
            (config,) = [
                p for p in root["arguments"]["parameters"] if p["name"] == "runtime-config"
            ]
            current = json.loads(config["value"])
            values = {**current.get("parameterValues", {}), **parameter_values}
            config["value"] = go_json({**current, "parameterValues": values})
    return dict(json.loads(json.dumps(workflow).replace("{{workflow.uid}}", run_id)))


def task_kubernetes(docs: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """The kubernetes platform config of a root-DAG task's executor (empty where none)."""
    spec = docs[0]
    component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    platform = docs[1] if len(docs) > 1 and docs[1] else {}
    executors = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {})
    return dict(executors.get("executors", {}).get(component["executorLabel"], {}))


def name_volumes(
    spec: dict[str, Any], kubernetes: Mapping[str, Any], parameters: Mapping[str, Any]
) -> None:
    """Name the volumes of a patch or pod spec that the preview leaves unnamed (`pvc-<i>`,
    `secret-<i>`) from the run's pipeline parameters, as KFP's driver resolves
    `pvcNameParameter` and `secretNameParameter`."""
    sources = (
        ("pvcMount", "pvc", "persistentVolumeClaim", "claimName", "pvcNameParameter"),
        ("secretAsVolume", "secret", "secret", "secretName", "secretNameParameter"),
    )
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    for field, prefix, kind, key, parameter in sources:
        for index, item in enumerate(kubernetes.get(field, [])):
            source = volumes[f"{prefix}-{index}"][kind]
            input_name = item.get(parameter, {}).get("componentInputParameter")
            if not source.get(key) and input_name:
                source[key] = str(parameters[input_name])


def run_values(docs: list[dict[str, Any]], run_id: str) -> dict[str, dict[str, str]]:
    """The values KFP's driver fills into each task's patch (`PLACEHOLDERS`) for one run."""
    spec = docs[0]
    values = {}
    for index, task in enumerate(preview.driver_pod_spec_patches(docs)):
        component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
        executor_input = {"inputs": {}, "outputs": {"outputFile": "/tmp/kfp_outputs/output.json"}}
        given = (
            run_id,
            str(index + 2),  # the root DAG's execution is 1
            json.dumps(executor_input, separators=(",", ":")),
            json.dumps(component, separators=(",", ":")),
        )
        values[task] = dict(zip(PLACEHOLDERS, given, strict=True))
    return values


def golden_patches(
    docs: list[dict[str, Any]],
    values: Mapping[str, Mapping[str, str]],
    parameters: Mapping[str, Any],
) -> dict[str, str]:
    """Per task, the pod spec patch KFP's driver writes for the run, as JSON: the preview's, its
    placeholders filled with `values[task]` and its volumes named from `parameters`."""
    patches = {}
    for task, patch in preview.driver_pod_spec_patches(docs).items():
        filled = copy.deepcopy(patch)
        for container in filled["containers"]:
            container["command"] = [values[task].get(a, a) for a in container.get("command", [])]
        name_volumes(filled, task_kubernetes(docs, task), parameters)
        patches[task] = json.dumps(filled, separators=(",", ":"))
    return patches
