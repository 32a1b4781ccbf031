"""The TrainJob a trainer step creates, built at compile time so it is visible and checked there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from secureml.core import contract
from secureml.core.contract import RUNNER_NAME
from secureml.gpu.placement import Placement
from secureml.gpu.request import GPURequest, WholeGPU
from secureml.profile.model import TenantProfile

Manifest = dict[str, Any]

KIND = "TrainJob"
RUNTIME_KIND = "ClusterTrainingRuntime"
# The name the compiled manifest carries until the submitter names the run's job.
NAME_PLACEHOLDER = "secureml-trainjob"


@dataclass(frozen=True)
class NodeSpec:
    """What each node of a trainer step gets: the compiler's decisions for the step."""

    pipeline: str
    step: str
    image: str  # fully spelled, digest-pinned
    digest: str | None
    nodes: int
    runtime: str
    request: GPURequest | None
    placement: Placement
    env: dict[str, str]  # the launcher's SECUREML_* for a node (isolation of the node's GPU)
    scratch: tuple[str, ...]
    launcher: tuple[str, ...]  # the launcher prefix (in-image or injected)
    timeout_seconds: int | None = None


def scratch_volume(path: str) -> str:
    """The emptyDir volume name of one scratch path (the same names the compiler gives steps)."""
    return contract.label_value("scratch" + path.replace("/", "-")).lower()[:63] or "scratch"


def node_labels(profile: TenantProfile, node: NodeSpec) -> dict[str, str]:
    """The labels every node pod carries: the step's, its isolation and the trainer-node mark."""
    return {
        contract.LABEL_TENANT: contract.label_value(profile.metadata.name),
        contract.LABEL_PIPELINE: contract.label_value(node.pipeline),
        contract.LABEL_STEP: node.step,
        contract.LABEL_ISOLATION: node.placement.isolation,
        contract.LABEL_TRAINER_NODE: "true",
    }


def node_annotations(profile: TenantProfile, node: NodeSpec) -> dict[str, str]:
    annotations = {contract.ANNOTATION_SPIFFE_ID: profile.spiffe_id(node.pipeline, node.step)}
    if node.digest:
        annotations[contract.ANNOTATION_IMAGE_DIGEST] = node.digest
    if node.request is not None:
        annotations[contract.ANNOTATION_GPU_REQUEST] = node.request.to_json()
    return annotations


def container_security_context(profile: TenantProfile) -> Manifest:
    hardening = profile.spec.hardening
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": hardening.read_only_root_filesystem,
        "runAsNonRoot": True,
        "runAsUser": hardening.run_as_user,
        "runAsGroup": hardening.run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context(profile: TenantProfile) -> Manifest:
    hardening = profile.spec.hardening
    return {
        "runAsNonRoot": True,
        "runAsUser": hardening.run_as_user,
        "runAsGroup": hardening.run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _placement(placed: Placement) -> Manifest:
    spec: Manifest = {}
    if placed.node_selector:
        spec["nodeSelector"] = dict(placed.node_selector)
    if placed.node_affinity:
        term = {"matchExpressions": [dict(e) for e in placed.node_affinity]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    if placed.tolerations:
        spec["tolerations"] = [dict(t) for t in placed.tolerations]
    return spec


def _pod_patch(profile: TenantProfile, node: NodeSpec) -> Manifest:
    container: Manifest = {
        "name": contract.TRAINER_NODE_CONTAINER,
        "securityContext": container_security_context(profile),
    }
    spec: Manifest = {
        "serviceAccountName": RUNNER_NAME,
        "securityContext": pod_security_context(profile),
        **_placement(node.placement),
    }
    if node.scratch:
        spec["volumes"] = [{"name": scratch_volume(p), "emptyDir": {}} for p in node.scratch]
        container["volumeMounts"] = [
            {"name": scratch_volume(p), "mountPath": p} for p in node.scratch
        ]
    spec["containers"] = [container]
    return {
        "metadata": {
            "labels": node_labels(profile, node),
            "annotations": node_annotations(profile, node),
        },
        "spec": spec,
    }


def resources_per_node(request: GPURequest | None, placed: Placement) -> Manifest | None:
    if not isinstance(request, WholeGPU) or not placed.accelerator_type:
        return None
    return {"limits": {placed.accelerator_type: str(placed.accelerator_count)}}


def trainjob_manifest(profile: TenantProfile, node: NodeSpec) -> Manifest:
    """The step's TrainJob, all but its name and the step's argv (docs/architecture.md)."""
    trainer: Manifest = {
        "image": node.image,
        "command": list(node.launcher),
        "numNodes": node.nodes,
        "env": [{"name": k, "value": v} for k, v in sorted(node.env.items())],
    }
    resources = resources_per_node(node.request, node.placement)
    if resources is not None:
        trainer["resourcesPerNode"] = resources
    replicated = {
        "name": contract.TRAINER_REPLICATED_JOB,
        "template": {"spec": {"template": _pod_patch(profile, node)}},
    }
    spec: Manifest = {
        "runtimeRef": {
            "apiGroup": contract.TRAINER_GROUP,
            "kind": RUNTIME_KIND,
            "name": node.runtime,
        },
        "trainer": trainer,
        "runtimePatches": [
            {
                "manager": contract.TRAINER_PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {"spec": {"replicatedJobs": [replicated]}},
                },
            }
        ],
    }
    if node.timeout_seconds:
        spec["activeDeadlineSeconds"] = node.timeout_seconds
    return {
        "apiVersion": contract.TRAINER_API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": NAME_PLACEHOLDER,
            "namespace": profile.spec.namespace,
            "labels": {
                contract.LABEL_TENANT: contract.label_value(profile.metadata.name),
                contract.LABEL_PIPELINE: contract.label_value(node.pipeline),
                contract.LABEL_STEP: node.step,
            },
        },
        "spec": spec,
    }


def pod_patch_of(trainjob: Manifest) -> Manifest:
    """The secureml runtime patch's pod template (metadata and spec) of a TrainJob; {} if none."""
    for patch in trainjob.get("spec", {}).get("runtimePatches", []) or []:
        if patch.get("manager") != contract.TRAINER_PATCH_MANAGER:
            continue
        jobs = patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {})
        for job in jobs.get("replicatedJobs", []) or []:
            if job.get("name") == contract.TRAINER_REPLICATED_JOB:
                template: Manifest = job.get("template", {}).get("spec", {}).get("template", {})
                return template
    return {}


def with_run(trainjob: Manifest, name: str, argv: list[str]) -> Manifest:
    """The compiled TrainJob named `name` for this run, the step's resolved argv behind the
    launcher (a new dict)."""
    import copy

    job = copy.deepcopy(trainjob)
    job["metadata"]["name"] = name
    job["spec"]["trainer"]["command"] = [*job["spec"]["trainer"]["command"], *argv]
    return job
