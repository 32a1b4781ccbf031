"""The Argo Workflow KFP 2.17's API server submits for a compiled pipeline, without KFP's backend.

KFP's backend cannot be built here (the Go module proxy refuses `github.com/kubeflow/pipelines`),
so this module computes what it would submit, learnt from kubeflow/pipelines 2.17.0 (read, not
copied):

- `compile_workflow(docs)` is `backend/src/v2/compiler/argocompiler.Compile` (argo.go, dag.go,
  container.go, security_context.go, common.go, proto.go, and the component walk of
  `backend/src/v2/compiler/visitor.go`): the `components-<sha256>`, `implementations-<sha256>`,
  `kubernetes-<component>` and `components-root` workflow arguments (each the protojson of the
  message re-marshalled by Go's encoding/json: keys sorted, `<>&` escaped; the hash is the
  sha256 of Go's encoding/json of the executor's container struct), the `system-container-driver`,
  `[metadata-<a>-<l>-]system-container-executor` and `-impl` (the `kfp-launcher` init container,
  the scratch emptyDirs, 2.17's securityContext), `system-dag-driver`, the `root` DAG and the
  `entrypoint`. `tests/e2e/test_kfp_workflow.py` checks it against KFP's own golden Workflows.
- `kfp_workflow(docs, name=..., ...)` adds what `backend/src/apiserver/template/v2_template.go`
  (`RunWorkflow`) and `resource/resource_manager.go` (`CreateRun`) do to it for one run: the
  namespace, the run's service account, `sidecar.istio.io/inject: "false"` on every template,
  the `pipeline/runid` label on the Workflow and on every pod, the run-name annotation,
  `{{workflow.uid}}` replaced by the run id. Two differences, both for the tests: the Workflow
  gets a fixed `metadata.name` (KFP sets `generateName` and the API server picks the suffix),
  and the compiler's empty `status` (`startedAt`/`finishedAt` null, which the API server prunes)
  is left out.
- `driver_patches(docs, values)`: the pod spec patch KFP's container driver writes for each task
  (`backend/src/v2/driver`), which is what the preview computes
  (`secureml.pods.preview.driver_pod_spec_patches`), with the run's values filled in. The
  kfp-driver STAND-IN (tests/harness/e2e/kfp-driver-standin) hands it to Argo: a test publishes it
  in the run's object store under `patch_key(workflow name, task name)`. A volume whose claim,
  secret or config map the preview leaves unnamed (a pipeline input KFP's driver resolves) is
  refused.
- `pipeline_from_workflow(workflow)`: the pipeline documents back from a Workflow of this shape
  (KFP's goldens carry their whole pipeline in their arguments).

Supported: what the repository's pipelines use, container tasks of the root DAG with parameter
and artifact passing, their dependencies, the kubernetes platform spec per executor (pod metadata
included) and the API server's deployment settings (`ApiServerSettings`). Refused with
`UnsupportedPipelineError`, rather than given a shape KFP would not produce: nested pipelines and
conditions (sub-DAGs), loops, exit handlers, retry policies, importers, KFP's PVC create/delete
ops, the pipeline-level platform config (workspace, TTL, deadline), fields the compiler does not
know.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from secureml.core import contract
from secureml.pods import preview

PIPELINE_RUNNER = "pipeline-runner"  # common.DefaultPipelineRunnerServiceAccount
ISTIO_INJECT = "sidecar.istio.io/inject"
RUN_ID_LABEL = "pipeline/runid"
RUN_NAME_ANNOTATION = "pipelines.kubeflow.org/run_name"
V2_COMPONENT = "pipelines.kubeflow.org/v2_component"
RUNTIME_ROLE = "pipelines.kubeflow.org/runtime-role"
SCHEMA_VERSION = "2.1.0"
PATCH_PREFIX = "kfp-driver-standin"
_NAMED_SOURCES = (
    ("persistentVolumeClaim", "claimName"),
    ("secret", "secretName"),
    ("configMap", "name"),
)
# What KFP's driver fills in at run time, shown so in the preview's patches (tests/e2e/steps.py).
PLACEHOLDERS = ("<run_id>", "<execution_id>", "<executor_input>", "<component_spec>")


class UnsupportedPipelineError(ValueError):
    """A pipeline feature this model of KFP's compiler does not produce the shape of."""


@dataclass(frozen=True)
class KfpSystemImages:
    """KFP's own images in the Workflow: its API server's V2_DRIVER_IMAGE and V2_LAUNCHER_IMAGE
    (the 2.17.0 manifests set both to the release; the compiler's own default is `:latest`)."""

    driver: str = preview.KFP_DRIVER_IMAGE
    launcher: str = preview.KFP_LAUNCHER_IMAGE


@dataclass(frozen=True)
class ApiServerSettings:
    """The API server's environment that shows in the Workflow: PIPELINE_LOG_LEVEL and
    PUBLISH_LOGS (the drivers' and the launcher copy's `--log_level`/`--publish_logs`). The
    defaults are KFP 2.17.0's deployment (`preview.LOG_FLAGS`); None: unset, as in KFP's tests."""

    log_level: str | None = preview.LOG_FLAGS[1]
    publish_logs: str | None = preview.LOG_FLAGS[3]

    def flags(self) -> list[str]:
        out = [] if self.log_level is None else ["--log_level", self.log_level]
        return out + ([] if self.publish_logs is None else ["--publish_logs", self.publish_logs])


UNSET = ApiServerSettings(log_level=None, publish_logs=None)

# --- Go's encoding/json, as KFP's stablyMarshalJSON and hashValue write ---------------------------


def go_json(value: Any) -> str:
    """encoding/json.Marshal of a decoded JSON value: map keys sorted, HTML characters escaped,
    numbers as float64."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(float(value))
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(item) for item in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{_go_string(k)}:{go_json(v)}" for k, v in items) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def _go_string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        out = out.replace(char, escaped)
    return out.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _go_float(number: float) -> str:
    """strconv.AppendFloat(f, 'f' or 'e', -1, 64) as encoding/json picks and trims it."""
    if number == 0:
        return "-0" if str(number).startswith("-") else "0"
    exact = Decimal(repr(number))  # repr: the shortest digits that round-trip, as Go's -1
    if 1e-6 <= abs(number) < 1e21:
        return format(exact.normalize(), "f")
    sign, digits, exponent = exact.as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = int(exponent) + len(digits) - 1
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}".replace(
        "e-0", "e-"
    )


# --- the compiler -------------------------------------------------------------------------------

# PipelineDeploymentConfig.PipelineContainerSpec as protoc-gen-go declares it: field order and the
# encoding/json names (the proto names) hashValue marshals; (protojson name, json name, kind).
_CONTAINER_FIELDS = (
    ("image", "image", "string"),
    ("command", "command", "strings"),
    ("args", "args", "strings"),
    ("lifecycle", "lifecycle", "lifecycle"),
    ("resources", "resources", "resources"),
    ("env", "env", "env"),
)
_RESOURCE_FIELDS = (
    ("cpuLimit", "cpu_limit", "double"),
    ("memoryLimit", "memory_limit", "double"),
    ("cpuRequest", "cpu_request", "double"),
    ("memoryRequest", "memory_request", "double"),
    ("resourceCpuLimit", "resource_cpu_limit", "string"),
    ("resourceMemoryLimit", "resource_memory_limit", "string"),
    ("resourceCpuRequest", "resource_cpu_request", "string"),
    ("resourceMemoryRequest", "resource_memory_request", "string"),
    ("accelerator", "accelerator", "accelerator"),
)
_ACCELERATOR_FIELDS = (
    ("type", "type", "string"),
    ("count", "count", "int64"),
    ("resourceType", "resource_type", "string"),
    ("resourceCount", "resource_count", "string"),
)
_EXEC_FIELDS = (("command", "command", "strings"), ("args", "args", "strings"))
_ENV_FIELDS = (("name", "name", "string"), ("value", "value", "string"))
_TASK_UNSUPPORTED = {
    "triggerPolicy": "conditions and exit handlers (dsl.If, dsl.ExitHandler)",
    "retryPolicy": "retry policies (.set_retry)",
    "parameterIterator": "loops (dsl.ParallelFor)",
    "artifactIterator": "loops (dsl.ParallelFor)",
    "iteratorPolicy": "loops (dsl.ParallelFor)",
}


def _struct_json(value: Any, fields: tuple[tuple[str, str, str], ...], where: str) -> str:
    """encoding/json of a protoc-gen-go struct (fields in declaration order, omitempty)."""
    if not isinstance(value, dict):
        raise UnsupportedPipelineError(f"{where}: expected a mapping, got {value!r}")
    unknown = set(value) - {name for name, _, _ in fields}
    if unknown:
        raise UnsupportedPipelineError(
            f"{where}: unknown field(s) {sorted(unknown)}: KFP 2.17's PipelineContainerSpec has "
            f"{[name for name, _, _ in fields]}"
        )
    parts = []
    for name, json_name, kind in fields:
        if name not in value:
            continue
        item = value[name]
        encoded = _field_json(item, kind, f"{where}.{name}")
        if encoded is not None:
            parts.append(f"{_go_string(json_name)}:{encoded}")
    return "{" + ",".join(parts) + "}"


def _field_json(item: Any, kind: str, where: str) -> str | None:
    """One field's encoding, or None where omitempty leaves it out."""
    if kind == "string":
        return _go_string(str(item)) if item != "" else None
    if kind == "strings":
        return go_json([str(x) for x in item]) if item else None
    if kind == "double":
        return _go_float(float(item)) if float(item) != 0 else None
    if kind == "int64":
        return str(int(item)) if int(item) != 0 else None
    if kind == "env":
        return (
            "[" + ",".join(_struct_json(e, _ENV_FIELDS, where) for e in item) + "]"
            if item
            else None
        )
    nested = {
        "lifecycle": (("preCacheCheck", "pre_cache_check", "exec"),),
        "exec": _EXEC_FIELDS,
        "resources": _RESOURCE_FIELDS,
        "accelerator": _ACCELERATOR_FIELDS,
    }[kind]
    return _struct_json(item, nested, where)


def container_hash(container: Mapping[str, Any], where: str = "container") -> str:
    """argocompiler's hashComponentContainer: sha256 of encoding/json of the container struct."""
    encoded = _struct_json(dict(container), _CONTAINER_FIELDS, where)
    return hashlib.sha256(encoded.encode()).hexdigest()


def _protojson_container(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container as protojson writes it: an int64 (`accelerator.count`) is a JSON string."""
    out = copy.deepcopy(dict(container))
    accelerator = out.get("resources", {}).get("accelerator")
    if isinstance(accelerator, dict) and "count" in accelerator:
        accelerator["count"] = str(int(accelerator["count"]))
    return out


@dataclass(frozen=True)
class _Pipeline:
    spec: dict[str, Any]
    kubernetes: dict[str, Any]  # executor label -> KubernetesExecutorConfig (protojson)

    @property
    def name(self) -> str:
        return str(self.spec["pipelineInfo"]["name"])

    @property
    def components(self) -> dict[str, Any]:
        return dict(self.spec.get("components", {}))

    @property
    def executors(self) -> dict[str, Any]:
        return dict(self.spec.get("deploymentSpec", {}).get("executors", {}))


def _pipeline(docs: Sequence[Mapping[str, Any]]) -> _Pipeline:
    """The PipelineSpec and the kubernetes platform spec among the compiled YAML's documents."""
    specs = [dict(d) for d in docs if d and "pipelineInfo" in d]
    platforms = [dict(d) for d in docs if d and "platforms" in d]
    if len(specs) != 1:
        raise UnsupportedPipelineError(f"expected one PipelineSpec document, found {len(specs)}")
    if len(platforms) > 1:
        raise UnsupportedPipelineError(
            f"expected at most one platform spec, found {len(platforms)}"
        )
    spec = specs[0]
    if spec.get("schemaVersion") != SCHEMA_VERSION:
        raise UnsupportedPipelineError(
            f"schemaVersion {spec.get('schemaVersion')!r}: KFP only supports {SCHEMA_VERSION}"
        )
    if not spec.get("pipelineInfo", {}).get("name"):
        raise UnsupportedPipelineError("pipelineInfo.name is empty")
    kubernetes = platforms[0].get("platforms", {}).get("kubernetes", {}) if platforms else {}
    if kubernetes.get("pipelineConfig"):
        raise UnsupportedPipelineError(
            "platforms.kubernetes.pipelineConfig (workspace, TTL, deadline) is not supported"
        )
    executors = kubernetes.get("deploymentSpec", {}).get("executors", {})
    return _Pipeline(spec, dict(executors))


class _Compiler:
    """One run of argocompiler.Compile, its state as the Go compiler keeps it."""

    def __init__(
        self,
        pipeline: _Pipeline,
        images: KfpSystemImages,
        settings: ApiServerSettings,
        display_name: str,
    ) -> None:
        self.pipeline = pipeline
        self.images = images
        self.settings = settings
        self.display_name = display_name
        self.arguments: list[dict[str, Any]] = []
        self.templates: list[dict[str, Any]] = []
        self.template_names: set[str] = set()

    # workflow arguments (saveProtoToArguments: the first of a name wins)
    def _save(self, name: str, value: str) -> None:
        if all(p["name"] != name for p in self.arguments):
            self.arguments.append({"name": name, "value": value})

    def _has(self, name: str) -> bool:
        return any(p["name"] == name for p in self.arguments)

    def _hash(self, component: str) -> str:
        if component == "root":
            return component
        label = self.pipeline.components[component].get("executorLabel")
        container = self.pipeline.executors.get(label, {}).get("container")
        return container_hash(container, f"deploymentSpec.executors.{label}.container")

    def compile(self) -> dict[str, Any]:
        root = self.pipeline.spec.get("root")
        if not isinstance(root, dict) or "dag" not in root:
            raise UnsupportedPipelineError("root component has no dag")
        dag = copy.deepcopy(root["dag"])
        tasks: dict[str, Any] = dag.get("tasks", {})
        if not tasks:
            raise UnsupportedPipelineError("DAG root must contain one or more tasks")
        for task_name in sorted(tasks):  # visitor.go: leaves first, tasks in name order
            self._visit(task_name, tasks[task_name])
        self._add_implicit_dependencies(tasks)
        root_spec = {**root, "dag": dag}
        self._save("components-root", go_json(root_spec))
        dag_tasks: list[dict[str, Any]] = []
        for task_name in sorted(tasks):
            dag_tasks += self._task(task_name, tasks[task_name])
        self._add_template(
            {
                "name": "root",
                "inputs": {"parameters": [{"name": "parent-dag-id"}]},
                "dag": {"tasks": dag_tasks},
                "metadata": {},
                "outputs": {},
            }
        )
        driver = {
            "name": "root-driver",
            "template": self._dag_driver_template(),
            "arguments": {
                "parameters": [
                    {"name": "component", "value": "{{workflow.parameters.components-root}}"},
                    {"name": "runtime-config", "value": go_json(self._runtime_config())},
                    {"name": "driver-type", "value": "ROOT_DAG"},
                ]
            },
        }
        root_task = {
            "name": "root",
            "template": "root",
            "arguments": {
                "parameters": [
                    {
                        "name": "parent-dag-id",
                        "value": "{{tasks.root-driver.outputs.parameters.execution-id}}",
                    },
                    {"name": "condition", "value": ""},
                ]
            },
            "depends": "root-driver.Succeeded",
        }
        self._add_template(
            {
                "name": "entrypoint",
                "dag": {"tasks": [driver, root_task]},
                "inputs": {},
                "metadata": {},
                "outputs": {},
            }
        )
        security = preview.DRIVER_POD_SECURITY_CONTEXT
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"generateName": self.pipeline.name.split("/")[-1] + "-"},
            "spec": {
                "arguments": {"parameters": self.arguments},
                "entrypoint": "entrypoint",
                "podMetadata": {
                    "annotations": {V2_COMPONENT: "true"},
                    "labels": {V2_COMPONENT: "true"},
                },
                "securityContext": copy.deepcopy(security),
                "serviceAccountName": PIPELINE_RUNNER,
                "templates": self.templates,
            },
            "status": {"finishedAt": None, "startedAt": None},
        }

    def _visit(self, task_name: str, task: dict[str, Any]) -> None:
        where = f"root.dag.tasks.{task_name}"
        unsupported = sorted(set(task) & set(_TASK_UNSUPPORTED))
        if unsupported:
            raise UnsupportedPipelineError(
                f"{where}.{unsupported[0]}: {_TASK_UNSUPPORTED[unsupported[0]]} are not supported "
                "by this model of KFP's Argo compiler"
            )
        ref = task.get("componentRef", {}).get("name", "")
        component = self.pipeline.components.get(ref)
        if component is None:
            raise UnsupportedPipelineError(f"{where}.componentRef: component {ref!r} not found")
        if "dag" in component:
            raise UnsupportedPipelineError(
                f"{where}: component {ref} is a sub-DAG (a nested pipeline or a condition): not "
                "supported by this model of KFP's Argo compiler"
            )
        label = component.get("executorLabel", "")
        executor = self.pipeline.executors.get(label)
        if executor is None:
            raise UnsupportedPipelineError(f"{where}: executor {label!r} not in deploymentSpec")
        container = executor.get("container")
        if container is None:
            raise UnsupportedPipelineError(
                f"deploymentSpec.executors.{label}: only container executors are supported "
                f"(not {sorted(executor)})"
            )
        if container.get("image") in contract.KFP_PLATFORM_OP_IMAGES:
            raise UnsupportedPipelineError(
                f"{where}: KFP's PVC create/delete ops ({container['image']}) are not supported"
            )
        hashed = self._hash(ref)
        if label in self.pipeline.kubernetes:
            self._save(f"kubernetes-{ref}", go_json(self.pipeline.kubernetes[label]))
        self._save(f"components-{hashed}", go_json(component))
        self._save(f"implementations-{hashed}", go_json(_protojson_container(container)))

    def _add_implicit_dependencies(self, tasks: dict[str, Any]) -> None:
        for name in sorted(tasks):
            task = tasks[name]
            inputs = task.get("inputs", {})
            producers = [
                spec["taskOutputParameter"].get("producerTask", "")
                for _, spec in sorted(inputs.get("parameters", {}).items())
                if "taskOutputParameter" in spec
            ] + [
                spec["taskOutputArtifact"].get("producerTask", "")
                for _, spec in sorted(inputs.get("artifacts", {}).items())
                if "taskOutputArtifact" in spec
            ]
            for producer in producers:
                if producer not in tasks:
                    raise UnsupportedPipelineError(
                        f"root.dag.tasks.{name}.inputs: unknown producer task {producer!r}"
                    )
                deps = task.setdefault("dependentTasks", [])
                if producer not in deps:
                    deps.append(producer)

    def _add_template(self, template: dict[str, Any]) -> None:
        self.template_names.add(template["name"])
        self.templates.append(template)

    def _runtime_config(self) -> dict[str, Any]:
        """The job's runtime config: each root input's default (or null if optional)."""
        values: dict[str, Any] = {}
        parameters = self.pipeline.spec["root"].get("inputDefinitions", {}).get("parameters", {})
        for name, parameter in parameters.items():
            if "defaultValue" in parameter:
                values[name] = parameter["defaultValue"]
            elif parameter.get("isOptional"):
                values[name] = None
        return {"parameterValues": values} if values else {}

    def _task(self, name: str, task: dict[str, Any]) -> list[dict[str, Any]]:
        ref = task["componentRef"]["name"]
        hashed = self._hash(ref)
        driver_name = f"{name}-driver"
        parameters = [
            {"name": "component", "value": f"{{{{workflow.parameters.components-{hashed}}}}}"},
            {"name": "task", "value": go_json(task)},
            {
                "name": "container",
                "value": f"{{{{workflow.parameters.implementations-{hashed}}}}}",
            },
            {"name": "task-name", "value": name},
            {"name": "parent-dag-id", "value": "{{inputs.parameters.parent-dag-id}}"},
        ]
        if self._has(f"kubernetes-{ref}"):
            parameters.append(
                {
                    "name": "kubernetes-config",
                    "value": f"{{{{workflow.parameters.kubernetes-{ref}}}}}",
                }
            )
        driver: dict[str, Any] = {
            "name": driver_name,
            "template": self._container_driver_template(),
            "arguments": {"parameters": parameters},
        }
        if task.get("dependentTasks"):
            driver["depends"] = " && ".join(f"{d}.Succeeded" for d in task["dependentTasks"])
        label = self.pipeline.components[ref]["executorLabel"]
        metadata = self.pipeline.kubernetes.get(label, {}).get("podMetadata")
        outputs = f"{{{{tasks.{driver_name}.outputs.parameters"
        executor = {
            "name": name,
            "template": self._executor_templates(metadata),
            "arguments": {
                "parameters": [
                    {"name": "pod-spec-patch", "value": f"{outputs}.pod-spec-patch}}}}"},
                    {
                        "name": "cached-decision",
                        "default": "false",
                        "value": f"{outputs}.cached-decision}}}}",
                    },
                    *_metadata_parameters(metadata, with_values=True),
                ]
            },
            "depends": f"{driver_name}.Succeeded",
        }
        return [driver, executor]

    def _driver_args(self, kind: str) -> list[str]:
        common = [
            "--pipeline_name", self.pipeline.name,
            "--run_id", "{{workflow.uid}}",
            "--run_name", "{{workflow.name}}",
            "--run_display_name", self.display_name,
            "--pipeline_job_create_time_utc", "{{workflow.creationTimestamp}}",
            "--dag_execution_id", "{{inputs.parameters.parent-dag-id}}",
            "--component", "{{inputs.parameters.component}}",
            "--task", "{{inputs.parameters.task}}",
            "--task_name", "{{inputs.parameters.task-name}}",
        ]  # fmt: skip
        if kind == "CONTAINER":
            specific = [
                "--container", "{{inputs.parameters.container}}",
                "--iteration_index", "{{inputs.parameters.iteration-index}}",
                "--cached_decision_path", "{{outputs.parameters.cached-decision.path}}",
                "--pod_spec_patch_path", "{{outputs.parameters.pod-spec-patch.path}}",
                "--condition_path", "{{outputs.parameters.condition.path}}",
                "--kubernetes_config", "{{inputs.parameters.kubernetes-config}}",
            ]  # fmt: skip
            kind_arg = "CONTAINER"
        else:
            specific = [
                "--runtime_config", "{{inputs.parameters.runtime-config}}",
                "--iteration_index", "{{inputs.parameters.iteration-index}}",
                "--execution_id_path", "{{outputs.parameters.execution-id.path}}",
                "--iteration_count_path", "{{outputs.parameters.iteration-count.path}}",
                "--condition_path", "{{outputs.parameters.condition.path}}",
            ]  # fmt: skip
            kind_arg = "{{inputs.parameters.driver-type}}"
        servers = [
            "--http_proxy", "", "--https_proxy", "", "--no_proxy", "",
            "--ml_pipeline_server_address", preview.ML_PIPELINE_ADDRESS[0],
            "--ml_pipeline_server_port", preview.ML_PIPELINE_ADDRESS[1],
            "--mlmd_server_address", preview.MLMD_ADDRESS[0],
            "--mlmd_server_port", preview.MLMD_ADDRESS[1],
        ]  # fmt: skip
        return ["--type", kind_arg, *common, *specific, *servers, *self.settings.flags()]

    def _driver_container(self, kind: str) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "",
            "image": self.images.driver,
            "command": [contract.KFP_DRIVER_COMMAND],
            "args": self._driver_args(kind),
            "resources": copy.deepcopy(preview.DRIVER_RESOURCES),
            "securityContext": copy.deepcopy(preview.BACKEND_INIT_SECURITY_CONTEXT),
        }
        if kind == "CONTAINER":
            container["env"] = copy.deepcopy(list(preview.KFP_POD_ENV))
        return container

    def _container_driver_template(self) -> str:
        name = "system-container-driver"
        if name in self.template_names:
            return name
        self._add_template(
            {
                "name": name,
                "container": self._driver_container("CONTAINER"),
                "inputs": {
                    "parameters": [
                        {"name": "component"},
                        {"name": "task"},
                        {"name": "container"},
                        {"name": "task-name"},
                        {"name": "parent-dag-id"},
                        {"name": "iteration-index", "default": "-1"},
                        {"name": "kubernetes-config", "default": ""},
                    ]
                },
                "metadata": {"annotations": {RUNTIME_ROLE: "driver"}},
                "outputs": {
                    "parameters": [
                        {
                            "name": "pod-spec-patch",
                            "valueFrom": {"default": "", "path": "/tmp/outputs/pod-spec-patch"},
                        },
                        {
                            "name": "cached-decision",
                            "default": "false",
                            "valueFrom": {
                                "default": "false",
                                "path": "/tmp/outputs/cached-decision",
                            },
                        },
                        {
                            "name": "condition",
                            "valueFrom": {"default": "true", "path": "/tmp/outputs/condition"},
                        },
                    ]
                },
                "securityContext": copy.deepcopy(preview.DRIVER_POD_SECURITY_CONTEXT),
            }
        )
        return name

    def _dag_driver_template(self) -> str:
        name = "system-dag-driver"
        if name in self.template_names:
            return name
        self._add_template(
            {
                "name": name,
                "container": self._driver_container("DAG"),
                "inputs": {
                    "parameters": [
                        {"name": "component"},
                        {"name": "runtime-config", "default": ""},
                        {"name": "task", "default": ""},
                        {"name": "task-name", "default": ""},
                        {"name": "parent-dag-id", "default": "0"},
                        {"name": "iteration-index", "default": "-1"},
                        {"name": "driver-type", "default": "DAG"},
                    ]
                },
                "metadata": {"annotations": {RUNTIME_ROLE: "driver"}},
                "outputs": {
                    "parameters": [
                        {
                            "name": "execution-id",
                            "valueFrom": {"path": "/tmp/outputs/execution-id"},
                        },
                        {
                            "name": "iteration-count",
                            "valueFrom": {"default": "0", "path": "/tmp/outputs/iteration-count"},
                        },
                        {
                            "name": "condition",
                            "valueFrom": {"default": "true", "path": "/tmp/outputs/condition"},
                        },
                    ]
                },
                "securityContext": copy.deepcopy(preview.DRIVER_POD_SECURITY_CONTEXT),
            }
        )
        return name

    def _executor_templates(self, metadata: dict[str, Any] | None) -> str:
        """`[metadata-<a>-<l>-]system-container-executor` and its `-impl`, added once each."""
        prefix = ""
        if metadata is not None:
            prefix = (
                f"metadata-{len(metadata.get('annotations') or {})}-"
                f"{len(metadata.get('labels') or {})}-"
            )
        executor_name = f"{prefix}system-container-executor"
        impl_name = f"{prefix}system-container-impl"
        if executor_name in self.template_names:
            return executor_name
        names = _metadata_parameters(metadata, with_values=False)
        executor = {
            "name": executor_name,
            "inputs": {
                "parameters": [
                    {"name": "pod-spec-patch"},
                    {"name": "cached-decision", "default": "false"},
                    *copy.deepcopy(names),
                ]
            },
            "dag": {
                "tasks": [
                    {
                        "name": "executor",
                        "template": impl_name,
                        "arguments": {
                            "parameters": [
                                {
                                    "name": "pod-spec-patch",
                                    "value": "{{inputs.parameters.pod-spec-patch}}",
                                },
                                *(
                                    {
                                        "name": p["name"],
                                        "value": f"{{{{inputs.parameters.{p['name']}}}}}",
                                    }
                                    for p in names
                                ),
                            ]
                        },
                        "when": "{{inputs.parameters.cached-decision}} != true",
                    }
                ]
            },
            "metadata": {},
            "outputs": {},
        }
        system = ((preview.KFP_LAUNCHER_VOLUME, preview.KFP_LAUNCHER_DIR), *preview.BACKEND_SCRATCH)
        annotations: dict[str, str] = {RUNTIME_ROLE: "launcher"}
        labels: dict[str, str] = {}
        for kind, target in (("label", labels), ("annotation", annotations)):
            count = len((metadata or {}).get(f"{kind}s") or {})
            for index in range(1, count + 1):
                suffix = f"-{index}" if count > 1 else ""
                key = f"{{{{inputs.parameters.pod-metadata-{kind}-key{suffix}}}}}"
                target[key] = f"{{{{inputs.parameters.pod-metadata-{kind}-val{suffix}}}}}"
        template_metadata: dict[str, Any] = {"annotations": annotations}
        if labels:
            template_metadata["labels"] = labels
        impl = {
            "name": impl_name,
            "container": {
                "name": "",
                "image": "gcr.io/ml-pipeline/should-be-overridden-during-runtime",
                "command": ["should-be-overridden-during-runtime"],
                "env": copy.deepcopy(list(preview.KFP_POD_ENV)),
                "envFrom": [
                    {"configMapRef": {"name": preview.METADATA_CONFIGMAP, "optional": True}}
                ],
                "resources": {},
                "securityContext": copy.deepcopy(preview.BACKEND_SECURITY_CONTEXT),
                "volumeMounts": [{"mountPath": path, "name": name} for name, path in system],
            },
            "initContainers": [
                {
                    "name": contract.KFP_LAUNCHER_CONTAINER,
                    "image": self.images.launcher,
                    "command": [contract.KFP_LAUNCHER_COPY_COMMAND],
                    "args": ["--copy", preview.KFP_LAUNCHER_BINARY, *self.settings.flags()],
                    "resources": copy.deepcopy(preview.LAUNCHER_RESOURCES),
                    "securityContext": copy.deepcopy(preview.BACKEND_INIT_SECURITY_CONTEXT),
                    "volumeMounts": [
                        {"mountPath": preview.KFP_LAUNCHER_DIR, "name": preview.KFP_LAUNCHER_VOLUME}
                    ],
                }
            ],
            "inputs": {"parameters": [{"name": "pod-spec-patch"}, *copy.deepcopy(names)]},
            "metadata": template_metadata,
            "outputs": {},
            "podSpecPatch": "{{inputs.parameters.pod-spec-patch}}",
            "securityContext": copy.deepcopy(preview.BACKEND_POD_SECURITY_CONTEXT),
            "volumes": [{"emptyDir": {}, "name": name} for name, _ in system],
        }
        self._add_template(executor)
        self._add_template(impl)
        return executor_name


def _metadata_parameters(
    metadata: dict[str, Any] | None, *, with_values: bool
) -> list[dict[str, Any]]:
    """getPodMetadataParameters: annotations then labels, keys sorted, numbered when several."""
    parameters: list[dict[str, Any]] = []
    for kind in ("annotation", "label"):
        entries = (metadata or {}).get(f"{kind}s") or {}
        for index, key in enumerate(sorted(entries), start=1):
            suffix = f"-{index}" if len(entries) > 1 else ""
            names = (f"pod-metadata-{kind}-key{suffix}", f"pod-metadata-{kind}-val{suffix}")
            if with_values:
                parameters += [
                    {"name": names[0], "value": key},
                    {"name": names[1], "value": str(entries[key])},
                ]
            else:
                parameters += [{"name": names[0]}, {"name": names[1]}]
    return parameters


def compile_workflow(
    pipeline_docs: Sequence[Mapping[str, Any]],
    *,
    images: KfpSystemImages | None = None,
    settings: ApiServerSettings | None = None,
    display_name: str = "",
) -> dict[str, Any]:
    """argocompiler.Compile of the compiled pipeline's documents (PipelineSpec, platform spec)."""
    return _Compiler(
        _pipeline(pipeline_docs), images or KfpSystemImages(), settings or ApiServerSettings(),
        display_name,
    ).compile()  # fmt: skip


def pipeline_from_workflow(workflow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The PipelineSpec and platform spec a Workflow of this shape (KFP's goldens) was compiled
    from, out of its own arguments: `compile_workflow` of them gives the Workflow back."""
    arguments = {p["name"]: p["value"] for p in workflow["spec"]["arguments"]["parameters"]}

    def argument(placeholder: str) -> Any:
        return json.loads(arguments[placeholder.removeprefix("{{workflow.parameters.")[:-2]])

    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    components: dict[str, Any] = {}
    executors: dict[str, Any] = {}
    kubernetes: dict[str, Any] = {}
    for task in templates["root"]["dag"]["tasks"]:
        if task["template"] != "system-container-driver":
            continue
        given = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        component = argument(given["component"])
        components[json.loads(given["task"])["componentRef"]["name"]] = component
        executors[component["executorLabel"]] = {"container": argument(given["container"])}
        if "kubernetes-config" in given:
            kubernetes[component["executorLabel"]] = argument(given["kubernetes-config"])
    driver_args = templates["system-container-driver"]["container"]["args"]
    spec = {
        "components": components,
        "deploymentSpec": {"executors": executors},
        "pipelineInfo": {"name": driver_args[driver_args.index("--pipeline_name") + 1]},
        "root": json.loads(arguments["components-root"]),
        "schemaVersion": SCHEMA_VERSION,
    }
    return [spec, {"platforms": {"kubernetes": {"deploymentSpec": {"executors": kubernetes}}}}]


def preview_run_id(namespace: str, pipeline_name: str) -> str:
    """The run id `secureml.pods.preview` shows its pods with (a uuid5 of namespace and name)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"secureml-preview:{namespace}:{pipeline_name}"))


def run_metadata(name: str, namespace: str, run_id: str, display_name: str) -> dict[str, Any]:
    """The Workflow metadata KFP's API server writes for a run: its run id and run name."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": {RUN_ID_LABEL: run_id},
        "annotations": {RUN_NAME_ANNOTATION: display_name},
    }


def kfp_workflow(
    pipeline_docs: list[dict[str, Any]],
    *,
    name: str,
    namespace: str,
    service_account: str,
    images: KfpSystemImages | None = None,
    run_id: str | None = None,
    display_name: str | None = None,
    settings: ApiServerSettings | None = None,
) -> dict[str, Any]:
    """The Workflow KFP 2.17's API server creates for one run of the pipeline (module docstring).

    `run_id` defaults to the preview's (`preview_run_id`), so Argo's pods carry the preview's
    `pipeline/runid`; `display_name` (the run's, `--run_display_name`) defaults to `name`.
    """
    pipeline = _pipeline(pipeline_docs)
    parameters = pipeline.spec["root"].get("inputDefinitions", {}).get("parameters", {})
    for parameter, definition in sorted(parameters.items()):
        if "defaultValue" not in definition and not definition.get("isOptional"):
            raise UnsupportedPipelineError(
                f"root.inputDefinitions.parameters.{parameter}: no default and no run value: "
                "KFP's API server refuses the run; give the pipeline parameter a default"
            )
    run_id = run_id or preview_run_id(namespace, pipeline.name)
    display_name = name if display_name is None else display_name
    workflow = compile_workflow(
        pipeline_docs, images=images, settings=settings, display_name=display_name
    )
    del workflow["status"]
    workflow["metadata"] = run_metadata(name, namespace, run_id, display_name)
    spec = workflow["spec"]
    spec["serviceAccountName"] = service_account
    for template in spec["templates"]:
        template.setdefault("metadata", {}).setdefault("annotations", {}).setdefault(
            ISTIO_INJECT, "false"
        )
    workflow = json.loads(json.dumps(workflow).replace("{{workflow.uid}}", run_id))
    workflow["spec"]["podMetadata"]["labels"][RUN_ID_LABEL] = run_id
    return dict(workflow)


# --- the driver's patches -----------------------------------------------------------------------


def patch_key(run_name: str, task_name: str) -> str:
    """Where the kfp-driver STAND-IN fetches a task's pod spec patch in the run's object store:
    `GET <standinStore>/<patch_key(...)>` (run name: the Workflow's `metadata.name`)."""
    return f"{PATCH_PREFIX}/{run_name}/{task_name}/pod-spec-patch"


def driver_patches(
    pipeline_docs: Sequence[Mapping[str, Any]], values: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """Per task, the JSON pod spec patch KFP's container driver writes: the preview's
    (`preview.driver_pod_spec_patches`), main's `<run_id>`, `<execution_id>`, `<executor_input>`
    and `<component_spec>` replaced by `values[task]` (as tests/e2e/steps.py's `run_values`)."""
    patches = {}
    for task, patch in preview.driver_pod_spec_patches([dict(d) for d in pipeline_docs]).items():
        filled = copy.deepcopy(patch)
        given = values.get(task, {})
        for container in filled["containers"]:
            container["command"] = [given.get(arg, arg) for arg in container.get("command", [])]
            left = [arg for arg in container["command"] if arg in PLACEHOLDERS]
            if left:
                raise ValueError(f"task {task}: no value for {left} in the driver's patch")
        unnamed = [
            volume["name"]
            for volume in filled.get("volumes", [])
            for kind, key in _NAMED_SOURCES
            if kind in volume and not volume[kind].get(key)
        ]
        if unnamed:
            raise ValueError(
                f"task {task}: the preview leaves volume(s) {unnamed} without the name of their "
                "claim, secret or config map (a pipeline input KFP's driver resolves at run time, "
                "which the preview does not): no patch to publish"
            )
        patches[task] = json.dumps(filled, separators=(",", ":"))
    return patches
