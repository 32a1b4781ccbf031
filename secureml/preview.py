"""The Pod each task of a compiled pipeline becomes in the cluster, without a cluster.

`preview_pods(docs, profile)` reads the compiled YAML (the pipelineSpec and the kubernetes
platformSpec) and builds, per task, the Pod the KFP backend (>= 2.16) would create, then applies
the tenant bundle's MutatingAdmissionPolicy (`secureml.bundle.mutation.apply_mutations`). The admission rules (`secureml.rules`) are evaluated on exactly these pods.

What the preview models, per task:
- metadata: the task's pod labels and annotations, the tenant namespace;
- the `main` container: the executor's image; KFP's launcher `/kfp-launcher/launch <flags> --` as
  the command (flag values the driver fills in at run time are shown as `<name>`) and the task's
  own command and args as args; env (plain values, secrets, config maps, field paths, and KFP's own
  `KFP_POD_NAME`/`KFP_POD_UID`), resources (accelerator, cpu, memory), image pull policy, the
  security context the task sets plus what the backend adds on its own (no privilege escalation,
  drop ALL capabilities, seccomp RuntimeDefault), and volume mounts (the backend's scratch
  folders `/gcs`, `/s3`, `/minio`, `/.local`, `/.cache`, `/.config` included);
- KFP's `kfp-launcher` init container that copies the launcher binary into a shared emptyDir, with
  the backend's full default security context (runAsNonRoot included);
- the pod security context the backend sets (seccomp RuntimeDefault);
- scheduling: node selector, required/preferred node affinity, tolerations, activeDeadlineSeconds;
- volumes: emptyDir, PVC, secret, config map and generic ephemeral volumes of kfp.kubernetes.

Not modelled: Argo's own `init`/`wait` executor containers and the driver's flags to the launcher
(neither carries anything the tenant controls).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from secureml import contract

if TYPE_CHECKING:
    from secureml.profile import TenantProfile

KFP_LAUNCHER_IMAGE = f"{contract.KFP_SYSTEM_IMAGES[1]}:2.16.0"
KFP_LAUNCHER_VOLUME = "kfp-launcher"
KFP_LAUNCHER_DIR = "/kfp-launcher"
KFP_LAUNCHER_BINARY = f"{KFP_LAUNCHER_DIR}/launch"

# What the KFP backend (>= 2.16, backend/src/v2/compiler/argocompiler/security_context.go) sets on
# an executor pod: seccomp on the pod; on the user's container no privilege escalation, drop ALL,
# seccomp (runAsNonRoot is left to the task); on its own init container also runAsNonRoot.
BACKEND_POD_SECURITY_CONTEXT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
BACKEND_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
BACKEND_INIT_SECURITY_CONTEXT: dict[str, Any] = {**BACKEND_SECURITY_CONTEXT, "runAsNonRoot": True}
# The scratch folders the backend mounts into every executor pod (argocompiler/container.go).
BACKEND_SCRATCH = (
    ("gcs-scratch", "/gcs"),
    ("s3-scratch", "/s3"),
    ("minio-scratch", "/minio"),
    ("dot-local-scratch", "/.local"),
    ("dot-cache-scratch", "/.cache"),
    ("dot-config-scratch", "/.config"),
)
# The driver's command for the main container: KFP's launcher, its flags, then `--` and the
# task's own command and args as the container's args (backend/src/v2/driver/driver.go).
KFP_LAUNCHER_FLAGS = (
    "--pipeline_name",
    "--run_id",
    "--execution_id",
    "--executor_input",
    "--component_spec",
    "--pod_name",
    "--pod_uid",
    "--ml_pipeline_server_address",
    "--ml_pipeline_server_port",
    "--mlmd_server_address",
    "--mlmd_server_port",
)


def preview_pods(
    pipeline_yaml_docs: Sequence[dict[str, Any]], profile: TenantProfile
) -> dict[str, dict[str, Any]]:
    """Pods by task path (`task`, or `parent/child` inside nested pipelines), in pipeline order."""
    pipeline_spec = pipeline_yaml_docs[0]
    platform = (
        pipeline_yaml_docs[1] if len(pipeline_yaml_docs) > 1 and pipeline_yaml_docs[1] else {}
    )
    executors = pipeline_spec.get("deploymentSpec", {}).get("executors", {})
    k8s_executors = (
        platform.get("platforms", {})
        .get("kubernetes", {})
        .get("deploymentSpec", {})
        .get("executors", {})
    )
    from secureml.bundle.mutation import apply_mutations

    pipeline_name = pipeline_spec.get("pipelineInfo", {}).get("name", "pipeline")
    pods: dict[str, dict[str, Any]] = {}
    for path, executor_label in _executor_tasks(pipeline_spec):
        executor = executors.get(executor_label, {})
        if "container" not in executor:
            continue  # importer: runs inside KFP's driver
        pod = _pod(
            pipeline_name,
            path,
            executor["container"],
            k8s_executors.get(executor_label, {}),
            profile,
        )
        pods[path] = apply_mutations(pod, profile)
    return pods


def _executor_tasks(pipeline_spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    components = pipeline_spec.get("components", {})

    def walk(dag: dict[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
        for name, task in dag.get("tasks", {}).items():
            component = components.get(task.get("componentRef", {}).get("name", ""), {})
            path = f"{prefix}{name}"
            if "dag" in component:
                yield from walk(component["dag"], f"{path}/")
            elif "executorLabel" in component:
                yield path, component["executorLabel"]

    yield from walk(pipeline_spec.get("root", {}).get("dag", {}), "")


def _pod(
    pipeline: str, path: str, container: dict[str, Any], k8s: dict[str, Any], profile: TenantProfile
) -> dict[str, Any]:
    metadata = k8s.get("podMetadata", {})
    system = ((KFP_LAUNCHER_VOLUME, KFP_LAUNCHER_DIR), *BACKEND_SCRATCH)
    volumes: list[dict[str, Any]] = [{"name": name, "emptyDir": {}} for name, _ in system]
    mounts: list[dict[str, Any]] = [{"name": name, "mountPath": path} for name, path in system]
    _volumes(k8s, volumes, mounts)

    security = dict(BACKEND_SECURITY_CONTEXT)
    for key, value in k8s.get("securityContext", {}).items():
        security[key] = int(value) if key in ("runAsUser", "runAsGroup") else value

    main: dict[str, Any] = {
        "name": contract.KFP_MAIN_CONTAINER,
        "image": container.get("image", ""),
        "command": _launcher_command(pipeline, path),
        "args": [*container.get("command", []), *container.get("args", [])],
        "env": _env(container, k8s),
        "resources": _resources(container.get("resources", {})),
        "securityContext": security,
        "volumeMounts": mounts,
    }
    if k8s.get("imagePullPolicy"):
        main["imagePullPolicy"] = k8s["imagePullPolicy"]
    init = {
        "name": KFP_LAUNCHER_VOLUME,
        "image": KFP_LAUNCHER_IMAGE,
        "command": ["launcher-v2"],
        "args": ["--copy", KFP_LAUNCHER_BINARY],
        "securityContext": copy.deepcopy(BACKEND_INIT_SECURITY_CONTEXT),
        "volumeMounts": [{"name": KFP_LAUNCHER_VOLUME, "mountPath": KFP_LAUNCHER_DIR}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": copy.deepcopy(BACKEND_POD_SECURITY_CONTEXT),
        "initContainers": [init],
        "containers": [main],
        "volumes": volumes,
    }
    selector = k8s.get("nodeSelector", {}).get("labels")
    if selector:
        spec["nodeSelector"] = dict(selector)
    affinity = _affinity(k8s.get("nodeAffinity", []))
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    tolerations = [_toleration(t) for t in k8s.get("tolerations", []) if "tolerationJson" not in t]
    if tolerations:
        spec["tolerations"] = tolerations
    if k8s.get("activeDeadlineSeconds"):
        spec["activeDeadlineSeconds"] = int(k8s["activeDeadlineSeconds"])
    secrets = [{"name": s.get("secretName", "")} for s in k8s.get("imagePullSecret", [])]
    if secrets:
        spec["imagePullSecrets"] = secrets
    name = contract.label_value(f"{pipeline}-{path.replace('/', '-')}").lower() or "task"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": profile.spec.namespace,
            "labels": dict(metadata.get("labels", {})),
            "annotations": dict(metadata.get("annotations", {})),
        },
        "spec": spec,
    }


def _launcher_command(pipeline: str, path: str) -> list[str]:
    values = {
        "--pipeline_name": pipeline,
        "--pod_name": "$(KFP_POD_NAME)",
        "--pod_uid": "$(KFP_POD_UID)",
    }
    command = [KFP_LAUNCHER_BINARY]
    for flag in KFP_LAUNCHER_FLAGS:
        command += [flag, values.get(flag, f"<{flag[2:]}>")]
    return [*command, "--"]


def _env(container: dict[str, Any], k8s: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    env += [
        {"name": item["name"], "value": item.get("value", "")} for item in container.get("env", [])
    ]
    for secret in k8s.get("secretAsEnv", []):
        for item in secret.get("keyToEnv", []):
            env.append(
                {
                    "name": item.get("envVar", ""),
                    "valueFrom": {
                        "secretKeyRef": {
                            "name": secret.get("secretName", ""),
                            "key": item.get("secretKey", ""),
                        }
                    },
                }
            )
    for config_map in k8s.get("configMapAsEnv", []):
        for item in config_map.get("keyToEnv", []):
            env.append(
                {
                    "name": item.get("envVar", ""),
                    "valueFrom": {
                        "configMapKeyRef": {
                            "name": config_map.get("configMapName", ""),
                            "key": item.get("configMapKey", ""),
                        }
                    },
                }
            )
    for item in k8s.get("fieldPathAsEnv", []):
        env.append(
            {
                "name": item.get("name", ""),
                "valueFrom": {"fieldRef": {"fieldPath": item.get("fieldPath", "")}},
            }
        )
    return env


def _resources(resources: dict[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    accelerator = resources.get("accelerator", {})
    kind = accelerator.get("resourceType") or accelerator.get("type")
    if kind:
        limits[kind] = str(accelerator.get("resourceCount") or accelerator.get("count") or "1")
    for source, target, key in (
        ("resourceCpuLimit", limits, "cpu"),
        ("resourceMemoryLimit", limits, "memory"),
        ("resourceCpuRequest", requests, "cpu"),
        ("resourceMemoryRequest", requests, "memory"),
    ):
        if resources.get(source):
            target[key] = str(resources[source])
    result: dict[str, Any] = {}
    if limits:
        result["limits"] = limits
    if requests:
        result["requests"] = requests
    return result


def _volumes(
    k8s: dict[str, Any], volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]
) -> None:
    for item in k8s.get("emptyDirMounts", []):
        source = {key: item[key] for key in ("medium", "sizeLimit") if item.get(key)}
        volumes.append({"name": item["volumeName"], "emptyDir": source})
        mounts.append({"name": item["volumeName"], "mountPath": item["mountPath"]})
    for index, item in enumerate(k8s.get("pvcMount", [])):
        name = f"pvc-{index}"
        claim = item.get("constant") or item.get("pvcNameParameter", {}).get(
            "runtimeValue", {}
        ).get("constant", "")
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": str(claim)}})
        mounts.append({"name": name, "mountPath": item.get("mountPath", "")})
    for index, item in enumerate(k8s.get("secretAsVolume", [])):
        name = f"secret-{index}"
        volumes.append({"name": name, "secret": {"secretName": item.get("secretName", "")}})
        mounts.append({"name": name, "mountPath": item.get("mountPath", ""), "readOnly": True})
    for index, item in enumerate(k8s.get("configMapAsVolume", [])):
        name = f"configmap-{index}"
        volumes.append({"name": name, "configMap": {"name": item.get("configMapName", "")}})
        mounts.append({"name": name, "mountPath": item.get("mountPath", ""), "readOnly": True})
    for item in k8s.get("genericEphemeralVolume", []):
        name = item.get("volumeName", "ephemeral")
        claim_spec: dict[str, Any] = {
            "accessModes": item.get("accessModes", ["ReadWriteOnce"]),
            "resources": {"requests": {"storage": item.get("size", "")}},
        }
        if item.get("storageClassName"):
            claim_spec["storageClassName"] = item["storageClassName"]
        volumes.append({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": claim_spec}}})
        mounts.append({"name": name, "mountPath": item.get("mountPath", "")})


def _affinity(terms: list[dict[str, Any]]) -> dict[str, Any]:
    required: list[dict[str, Any]] = []
    preferred: list[dict[str, Any]] = []
    for term in terms:
        if "nodeAffinityJson" in term:
            continue  # set from a pipeline parameter at run time
        selector = {
            key: [dict(e) for e in term[key]]
            for key in ("matchExpressions", "matchFields")
            if term.get(key)
        }
        if term.get("weight"):
            preferred.append({"weight": int(term["weight"]), "preference": selector})
        else:
            required.append(selector)
    affinity: dict[str, Any] = {}
    if required:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return affinity


def _toleration(item: dict[str, Any]) -> dict[str, Any]:
    toleration = {key: item[key] for key in ("key", "operator", "value", "effect") if item.get(key)}
    if item.get("tolerationSeconds") is not None:
        toleration["tolerationSeconds"] = int(item["tolerationSeconds"])
    return toleration
