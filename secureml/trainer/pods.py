"""The node pods Trainer v2 and JobSet create from a TrainJob, modelled for the admission check."""

from __future__ import annotations

import copy
import math
from typing import Any

from secureml.core import contract
from secureml.trainer.manifest import pod_patch_of

Manifest = dict[str, Any]

TORCH_PORT = 29500  # Trainer v2.3's torch plugin: node 0's rendezvous port (ContainerTrainerPort)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
_TORCH_RUNTIME_TEMPLATE: Manifest = {
    "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
    "spec": {"containers": [{"name": contract.TRAINER_NODE_CONTAINER, "image": "runtime-default"}]},
}


def _runtime_pod_template(runtime: Manifest | None) -> Manifest:
    """The pod template of the runtime's replicated job `node` (a copy)."""
    if runtime is None:
        return copy.deepcopy(_TORCH_RUNTIME_TEMPLATE)
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        if job["name"] == contract.TRAINER_REPLICATED_JOB:
            return copy.deepcopy(job["template"]["spec"]["template"])
    raise ValueError(f"runtime has no replicated job {contract.TRAINER_REPLICATED_JOB!r}")


def _merge_container(container: Manifest, patch: Manifest) -> None:
    """A runtime patch's container entry: env merged by name, the rest replaced or appended."""
    if "securityContext" in patch:
        container["securityContext"] = copy.deepcopy(patch["securityContext"])
    if patch.get("volumeMounts"):
        container["volumeMounts"] = [
            *container.get("volumeMounts", []),
            *copy.deepcopy(patch["volumeMounts"]),
        ]
    if patch.get("env"):
        names = {e["name"] for e in patch["env"]}
        container["env"] = [
            *(e for e in container.get("env", []) if e["name"] not in names),
            *copy.deepcopy(patch["env"]),
        ]


def _processes_per_node(trainer: Manifest, resources: Manifest) -> str:
    """`PET_NPROC_PER_NODE` as Trainer v2.3's torch plugin sets it: the TrainJob's
    `numProcPerNode`, else `auto` where a node asks for a GPU, else its whole CPUs (at least 1)."""
    if "numProcPerNode" in trainer:
        return str(trainer["numProcPerNode"])
    asked = {**resources.get("limits", {}), **resources.get("requests", {})}
    if any("gpu" in name.lower() and _whole(value) > 0 for name, value in asked.items()):
        return "auto"
    cpu = resources.get("requests", {}).get("cpu") or resources.get("limits", {}).get("cpu")
    return str(max(1, _whole(cpu) if cpu is not None else 0))


def _whole(quantity: object) -> int:
    """A CPU or device quantity rounded up to a whole number, as Kubernetes' `Value()` does."""
    text = str(quantity).strip()
    if text.endswith("m"):
        return -(-int(text[:-1]) // 1000)
    return math.ceil(float(text))


def _torch_env(job: str, nodes: int, index: int, processes: str) -> list[Manifest]:
    """What Trainer's torch plugin sets for torchrun (`PET_*`), node `index` of `nodes`."""
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": processes},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": f"metadata.annotations['{contract.LABEL_JOB_COMPLETION_INDEX}']"
                }
            },
        },
        {"name": "PET_MASTER_ADDR", "value": f"{job}-{contract.TRAINER_REPLICATED_JOB}-0-0.{job}"},
        {"name": "PET_MASTER_PORT", "value": str(TORCH_PORT)},
    ]


def _add_completion_index(container: Manifest) -> None:
    """The Job controller's `JOB_COMPLETION_INDEX` (indexed Jobs), in every container it lacks."""
    env = container.setdefault("env", [])
    if all(variable.get("name") != "JOB_COMPLETION_INDEX" for variable in env):
        path = f"metadata.labels['{contract.LABEL_JOB_COMPLETION_INDEX}']"
        env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": path}}})


def node_pod(trainjob: Manifest, index: int, runtime: Manifest | None = None) -> Manifest:
    """Pod `index` of the TrainJob's trainer nodes, as the API server would receive it."""
    job = trainjob["metadata"]["name"]
    namespace = trainjob["metadata"].get("namespace", "")
    trainer = trainjob["spec"].get("trainer", {})
    template = _runtime_pod_template(runtime)
    patch = pod_patch_of(trainjob)
    metadata = template.setdefault("metadata", {})
    labels = {**metadata.get("labels", {}), **patch.get("metadata", {}).get("labels", {})}
    annotations = {
        **metadata.get("annotations", {}),
        **patch.get("metadata", {}).get("annotations", {}),
    }
    index_text = str(index)
    labels.update(
        {
            contract.LABEL_JOBSET_NAME: job,
            "jobset.sigs.k8s.io/replicatedjob-name": contract.TRAINER_REPLICATED_JOB,
            "jobset.sigs.k8s.io/job-index": "0",
            contract.LABEL_JOB_COMPLETION_INDEX: index_text,
            "batch.kubernetes.io/job-name": f"{job}-{contract.TRAINER_REPLICATED_JOB}-0",
        }
    )
    annotations[contract.LABEL_JOB_COMPLETION_INDEX] = index_text
    spec = template.setdefault("spec", {})
    patch_spec = patch.get("spec", {})
    for key, value in patch_spec.items():
        if key in ("containers", "initContainers"):
            continue
        if key == "volumes":
            spec["volumes"] = [*spec.get("volumes", []), *copy.deepcopy(value)]
        else:
            spec[key] = copy.deepcopy(value)
    by_name = {c["name"]: c for c in patch_spec.get("containers", [])}
    nodes = int(trainer.get("numNodes", 1))
    for container in spec.get("containers", []):
        if container["name"] == contract.TRAINER_NODE_CONTAINER:
            for key in ("image", "command", "args"):
                if key in trainer:
                    container[key] = list(trainer[key]) if key != "image" else trainer[key]
            if "resourcesPerNode" in trainer:
                container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
            processes = _processes_per_node(trainer, container.get("resources", {}))
            torch_env = _torch_env(job, nodes, index, processes)
            env = [*copy.deepcopy(trainer.get("env", [])), *torch_env]
            container["env"] = [*container.get("env", []), *env]
            container["ports"] = [{"containerPort": TORCH_PORT, "protocol": "TCP"}]
        if container["name"] in by_name:
            _merge_container(container, by_name[container["name"]])
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        _add_completion_index(container)
    spec.setdefault("restartPolicy", "Never")  # the runtime must set it: docs/trainer.md
    spec["subdomain"] = job
    spec["hostname"] = f"{job}-{contract.TRAINER_REPLICATED_JOB}-0-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{contract.TRAINER_REPLICATED_JOB}-0-{index}-abcde",
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def node_pods(trainjob: Manifest, runtime: Manifest | None = None) -> list[Manifest]:
    """Every node pod of the TrainJob (`spec.trainer.numNodes` of them)."""
    nodes = int(trainjob["spec"].get("trainer", {}).get("numNodes", 1))
    return [node_pod(trainjob, index, runtime) for index in range(nodes)]
