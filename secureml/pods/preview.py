"""The Pods a compiled pipeline becomes in the cluster, without a cluster: those KFP 2.17 creates.

The sources it is modelled on, and what it leaves out: docs/architecture.md (`pods/`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from secureml.core import contract
from secureml.core.jsontree import copy_json
from secureml.pods.argo import Template, Workflow, argo_pod

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

KFP_VERSION = "2.17.0"
KFP_LAUNCHER_IMAGE = f"{contract.KFP_LAUNCHER_REPOSITORY}:{KFP_VERSION}"
KFP_DRIVER_IMAGE = f"{contract.KFP_DRIVER_REPOSITORY}:{KFP_VERSION}"
KFP_LAUNCHER_VOLUME = contract.KFP_LAUNCHER_CONTAINER
KFP_LAUNCHER_DIR = contract.KFP_LAUNCHER_DIR
KFP_LAUNCHER_BINARY = contract.KFP_LAUNCHER_BINARY
WORKFLOW_SUFFIX = "p7x2k"  # Argo's generateName suffix (random in a cluster)
# The KFP API server's settings in its 2.17.0 deployment: what the compiler passes on to the
# launcher's copy step and the drivers.
LOG_FLAGS = ("--log_level", "1", "--publish_logs", "true")
ML_PIPELINE_ADDRESS = ("ml-pipeline.kubeflow.svc.cluster.local", "8887")
MLMD_ADDRESS = ("metadata-grpc-service.kubeflow.svc.cluster.local", "8080")
METADATA_CONFIGMAP = "metadata-grpc-configmap"

# security_context.go: seccomp on the executor pod; on main no privilege escalation, drop ALL,
# seccomp (runAsNonRoot is left to the task); on the init container and drivers also runAsNonRoot.
BACKEND_POD_SECURITY_CONTEXT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
BACKEND_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
BACKEND_INIT_SECURITY_CONTEXT: dict[str, Any] = {**BACKEND_SECURITY_CONTEXT, "runAsNonRoot": True}
DRIVER_POD_SECURITY_CONTEXT: dict[str, Any] = {**BACKEND_POD_SECURITY_CONTEXT, "runAsNonRoot": True}
LAUNCHER_RESOURCES: dict[str, Any] = {
    "limits": {"cpu": "500m", "memory": "256Mi"},
    "requests": {"cpu": "100m"},
}
DRIVER_RESOURCES: dict[str, Any] = {
    "limits": {"cpu": "500m", "memory": "512Mi"},
    "requests": {"cpu": "100m", "memory": "64Mi"},
}
# The scratch folders the backend mounts into every executor pod (argocompiler/container.go).
BACKEND_SCRATCH = (
    ("gcs-scratch", "/gcs"),
    ("s3-scratch", "/s3"),
    ("minio-scratch", "/minio"),
    ("dot-local-scratch", "/.local"),
    ("dot-cache-scratch", "/.cache"),
    ("dot-config-scratch", "/.config"),
)
# The driver's command for the main container (driver.go): KFP's launcher, its flags, then `--`;
# the task's own command and args are the container's args. `--publish_logs true` is there twice
# when logs are published (the default).
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
    "--publish_logs",
)
KFP_POD_ENV: tuple[dict[str, Any], ...] = (
    {"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
)
RUNTIME_ROLE = "pipelines.kubeflow.org/runtime-role"


def preview_pods(
    pipeline_yaml_docs: Sequence[dict[str, Any]], profile: TenantProfile, *, mutate: bool = True
) -> dict[str, dict[str, Any]]:
    """Executor pods by task path (`task`, or `parent/child` inside nested pipelines), in order;
    `mutate=False`: as Argo submits them, before the tenant's MutatingAdmissionPolicy."""
    return dict(iter_preview_pods(pipeline_yaml_docs, profile, mutate=mutate))


def iter_preview_pods(
    pipeline_yaml_docs: Sequence[dict[str, Any]], profile: TenantProfile, *, mutate: bool = True
) -> Iterator[tuple[str, dict[str, Any]]]:
    """`preview_pods` one (task path, pod) at a time, each pod built when asked for: the compiler
    judges and drops each in turn instead of holding every pod of a long pipeline at once."""
    pipeline_spec, k8s_executors = _split(pipeline_yaml_docs)
    executors = pipeline_spec.get("deploymentSpec", {}).get("executors", {})
    from secureml.pods.mutation.apply import apply_mutations

    workflow = _workflow(pipeline_spec, profile)
    pipeline = _pipeline_name(pipeline_spec)
    for path, executor_label, task in _executor_tasks(pipeline_spec):
        executor = executors.get(executor_label, {})
        if "container" not in executor:
            continue  # importer: runs inside KFP's driver
        if executor["container"].get("image") in contract.KFP_PLATFORM_OP_IMAGES:
            continue  # CreatePVC / DeletePVC: KFP's driver makes the call, no executor pod
        template = _executor_template(
            pipeline,
            executor["container"],
            k8s_executors.get(executor_label, {}),
            retry="retryPolicy" in task,
        )
        pod = argo_pod(workflow, f"{_node(workflow, path)}.executor", template)  # a new dict
        yield path, apply_mutations(pod, profile, in_place=True) if mutate else pod


def preview_driver_pods(
    pipeline_yaml_docs: Sequence[dict[str, Any]], profile: TenantProfile
) -> dict[str, dict[str, Any]]:
    """KFP's driver pods: `root-driver` (the root DAG's), then `<task path>-driver` per task."""
    pipeline_spec, _ = _split(pipeline_yaml_docs)
    workflow = _workflow(pipeline_spec, profile)
    name = _pipeline_name(pipeline_spec)
    root = _driver("ROOT_DAG", name)  # the entrypoint passes driver-type ROOT_DAG (argo.go)
    pods = {"root-driver": argo_pod(workflow, f"{workflow.name}.root-driver", root)}
    for path, _, _ in _executor_tasks(pipeline_spec):
        node = f"{_node(workflow, path)}-driver"
        pods[f"{path}-driver"] = argo_pod(workflow, node, _driver("CONTAINER", name))
    return pods


def _split(
    pipeline_yaml_docs: Sequence[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    pipeline_spec = pipeline_yaml_docs[0]
    platform = (
        pipeline_yaml_docs[1] if len(pipeline_yaml_docs) > 1 and pipeline_yaml_docs[1] else {}
    )
    k8s_executors = (
        platform.get("platforms", {})
        .get("kubernetes", {})
        .get("deploymentSpec", {})
        .get("executors", {})
    )
    return pipeline_spec, k8s_executors


def _pipeline_name(pipeline_spec: dict[str, Any]) -> str:
    return str(pipeline_spec.get("pipelineInfo", {}).get("name", "pipeline"))


def _workflow(pipeline_spec: dict[str, Any], profile: TenantProfile) -> Workflow:
    """The Workflow KFP's API server submits for one run of the pipeline."""
    name = _pipeline_name(pipeline_spec)
    prefix = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:200] or "pipeline"
    run_id = str(
        uuid.uuid5(uuid.NAMESPACE_URL, f"secureml-preview:{profile.spec.namespace}:{name}")
    )
    return Workflow(
        name=f"{prefix}-{WORKFLOW_SUFFIX}",
        namespace=profile.spec.namespace,
        uid=run_id,  # KFP replaces {{workflow.uid}} with the run id
        service_account=contract.RUNNER_NAME,
        pod_labels={"pipelines.kubeflow.org/v2_component": "true", "pipeline/runid": run_id},
        pod_annotations={"pipelines.kubeflow.org/v2_component": "true"},
    )


def _node(workflow: Workflow, path: str) -> str:
    """Argo's node name of a task's DAG node: `<workflow>.root.<parent>.<task>`."""
    return ".".join([workflow.name, "root", *path.split("/")])


def _executor_tasks(pipeline_spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    components = pipeline_spec.get("components", {})

    def walk(dag: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for name, task in dag.get("tasks", {}).items():
            component = components.get(task.get("componentRef", {}).get("name", ""), {})
            path = f"{prefix}{name}"
            if "dag" in component:
                yield from walk(component["dag"], f"{path}/")
            elif "executorLabel" in component:
                yield path, component["executorLabel"], task

    yield from walk(pipeline_spec.get("root", {}).get("dag", {}), "")


def _executor_template(
    pipeline: str, container: dict[str, Any], k8s: dict[str, Any], *, retry: bool
) -> Template:
    """KFP's `system-container-impl` template, and the driver's pod spec patch for the task.

    The template shares this module's constants: `argo_pod` copies every part of it into the pod.
    """
    system = ((KFP_LAUNCHER_VOLUME, KFP_LAUNCHER_DIR), *BACKEND_SCRATCH)
    main: dict[str, Any] = {
        "name": contract.KFP_MAIN_CONTAINER,
        "image": "gcr.io/ml-pipeline/should-be-overridden-during-runtime",
        "command": ["should-be-overridden-during-runtime"],
        "volumeMounts": [{"name": name, "mountPath": path} for name, path in system],
        "envFrom": [{"configMapRef": {"name": METADATA_CONFIGMAP, "optional": True}}],
        "env": list(KFP_POD_ENV),
        "securityContext": BACKEND_SECURITY_CONTEXT,
    }
    init = {
        "name": contract.KFP_LAUNCHER_CONTAINER,
        "image": KFP_LAUNCHER_IMAGE,
        "command": [contract.KFP_LAUNCHER_COPY_COMMAND],
        "args": ["--copy", KFP_LAUNCHER_BINARY, *LOG_FLAGS],
        "volumeMounts": [{"name": KFP_LAUNCHER_VOLUME, "mountPath": KFP_LAUNCHER_DIR}],
        "resources": LAUNCHER_RESOURCES,
        "securityContext": BACKEND_INIT_SECURITY_CONTEXT,
    }
    metadata = k8s.get("podMetadata", {})
    labels = dict(metadata.get("labels", {}))
    annotations = {
        RUNTIME_ROLE: "launcher",
        "sidecar.istio.io/inject": "false",
        **dict(metadata.get("annotations", {})),
    }
    name = ("retry-" if retry else "") + "system-container-impl"
    if metadata:
        name = f"metadata-{len(metadata.get('annotations', {}))}-{len(labels)}-{name}"
    return Template(
        name=name,
        main=main,
        init_containers=(init,),
        volumes=tuple({"name": name, "emptyDir": {}} for name, _ in system),
        security_context=BACKEND_POD_SECURITY_CONTEXT,
        labels=labels,
        annotations=annotations,
        patch=_pod_spec_patch(pipeline, container, k8s),
    )


def _pod_spec_patch(
    pipeline: str, container: dict[str, Any], k8s: dict[str, Any]
) -> dict[str, Any]:
    """What KFP's container driver writes as the executor's pod spec patch."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    _volumes(k8s, volumes, mounts)
    security: dict[str, Any] = {}
    for key, value in k8s.get("securityContext", {}).items():
        security[key] = int(value) if key in ("runAsUser", "runAsGroup") else value
    if security:
        security["capabilities"] = {"drop": ["ALL"]}  # k8s.go drops ALL with any task setting
    main: dict[str, Any] = {
        "name": contract.KFP_MAIN_CONTAINER,
        "image": container.get("image", ""),
        "command": _launcher_command(pipeline),
        "args": [*container.get("command", []), *container.get("args", [])],
        "env": _env(container, k8s),
        "resources": _resources(container.get("resources", {})),
    }
    if security:
        main["securityContext"] = security
    if mounts:
        main["volumeMounts"] = mounts
    if k8s.get("imagePullPolicy"):
        main["imagePullPolicy"] = k8s["imagePullPolicy"]
    patch: dict[str, Any] = {"containers": [main]}
    if volumes:
        patch["volumes"] = volumes
    selector = k8s.get("nodeSelector", {}).get("labels")
    if selector:
        patch["nodeSelector"] = dict(selector)
    affinity = _affinity(k8s.get("nodeAffinity", []))
    if affinity:
        patch["affinity"] = {"nodeAffinity": affinity}
    tolerations = [_toleration(t) for t in k8s.get("tolerations", []) if "tolerationJson" not in t]
    if tolerations:
        patch["tolerations"] = tolerations
    if k8s.get("activeDeadlineSeconds"):
        patch["activeDeadlineSeconds"] = int(k8s["activeDeadlineSeconds"])
    secrets = [{"name": s.get("secretName", "")} for s in k8s.get("imagePullSecret", [])]
    if secrets:
        patch["imagePullSecrets"] = secrets
    return patch


def _launcher_command(pipeline: str) -> list[str]:
    values = {
        "--pipeline_name": pipeline,
        "--pod_name": "$(KFP_POD_NAME)",
        "--pod_uid": "$(KFP_POD_UID)",
        "--ml_pipeline_server_address": ML_PIPELINE_ADDRESS[0],
        "--ml_pipeline_server_port": ML_PIPELINE_ADDRESS[1],
        "--mlmd_server_address": MLMD_ADDRESS[0],
        "--mlmd_server_port": MLMD_ADDRESS[1],
        "--publish_logs": "true",
    }
    command = [KFP_LAUNCHER_BINARY]
    for flag in KFP_LAUNCHER_FLAGS:
        command += [flag, values.get(flag, f"<{flag[2:]}>")]
    return [*command, "--publish_logs", "true", "--"]


def _driver(kind: str, pipeline: str) -> Template:
    """KFP's `system-dag-driver` (ROOT_DAG, DAG) or `system-container-driver` (CONTAINER)."""
    dag = kind != "CONTAINER"
    args = ["--type", kind, "--pipeline_name", pipeline]
    args += ["--run_id", "<run_id>", "--run_name", "<run_name>", "--run_display_name", ""]
    args += ["--pipeline_job_create_time_utc", "<create_time>"]
    args += ["--dag_execution_id", "<dag_execution_id>" if kind == "CONTAINER" else "0"]
    args += ["--component", "<component>", "--task", "<task>", "--task_name", "<task_name>"]
    if dag:
        args += ["--runtime_config", "<runtime_config>", "--iteration_index", "-1"]
        args += ["--execution_id_path", "/tmp/outputs/execution-id"]
        args += ["--iteration_count_path", "/tmp/outputs/iteration-count"]
        args += ["--condition_path", "/tmp/outputs/condition"]
    else:
        args += ["--container", "<container>", "--iteration_index", "-1"]
        args += ["--cached_decision_path", "/tmp/outputs/cached-decision"]
        args += ["--pod_spec_patch_path", "/tmp/outputs/pod-spec-patch"]
        args += ["--condition_path", "/tmp/outputs/condition"]
        args += ["--kubernetes_config", "<kubernetes_config>"]
    args += ["--http_proxy", "", "--https_proxy", "", "--no_proxy", ""]
    args += ["--ml_pipeline_server_address", ML_PIPELINE_ADDRESS[0]]
    args += ["--ml_pipeline_server_port", ML_PIPELINE_ADDRESS[1]]
    args += ["--mlmd_server_address", MLMD_ADDRESS[0], "--mlmd_server_port", MLMD_ADDRESS[1]]
    main: dict[str, Any] = {
        "name": contract.KFP_MAIN_CONTAINER,
        "image": KFP_DRIVER_IMAGE,
        "command": [contract.KFP_DRIVER_COMMAND],
        "args": [*args, *LOG_FLAGS],
        "resources": copy_json(DRIVER_RESOURCES),
        "env": copy_json(list(KFP_POD_ENV)) if kind == "CONTAINER" else [],
        "securityContext": copy_json(BACKEND_INIT_SECURITY_CONTEXT),
    }
    return Template(
        name="system-dag-driver" if dag else "system-container-driver",
        main=main,
        security_context=copy_json(DRIVER_POD_SECURITY_CONTEXT),
        annotations={RUNTIME_ROLE: "driver", "sidecar.istio.io/inject": "false"},
    )


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


def driver_pod_spec_patches(
    pipeline_yaml_docs: Sequence[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """KFP's container driver's pod spec patch per executor task path, as the preview's pods
    apply it (`Template.patch`): what KFP's backend fills in at run time shown as `<name>`."""
    pipeline_spec, k8s_executors = _split(pipeline_yaml_docs)
    executors = pipeline_spec.get("deploymentSpec", {}).get("executors", {})
    pipeline = _pipeline_name(pipeline_spec)
    patches = {}
    for path, executor_label, _ in _executor_tasks(pipeline_spec):
        container = executors.get(executor_label, {}).get("container")
        if container is None or container.get("image") in contract.KFP_PLATFORM_OP_IMAGES:
            continue  # no executor pod (as in iter_preview_pods)
        patches[path] = _pod_spec_patch(pipeline, container, k8s_executors.get(executor_label, {}))
    return patches
