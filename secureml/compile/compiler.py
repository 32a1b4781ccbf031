"""`secureml compile`: a KFP pipeline and a TenantProfile in, a checked, secured pipeline YAML out."""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml._kfp.deferred import referenced_graphs, retracing
from secureml._kfp.nested_merge import restore_own_configs
from secureml.compile.decorator import SecureSettings, settings_of
from secureml.compile.rules import TaskView, check_task, task_gpu_request
from secureml.core import contract
from secureml.core.contract import ISOLATION_TIMESLICE_SHIM
from secureml.core.errors import SecuremlError
from secureml.core.output_paths import save_text
from secureml.core.violation import Violation
from secureml.gpu import placement as gpu
from secureml.gpu.request import GPURequest, TimeSlice
from secureml.profile import runtime_image

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent
    from kfp.dsl.pipeline_task import PipelineTask

    from secureml.compile.k8s_config import TaskConfig
    from secureml.profile.model import TenantProfile
    from secureml.supplychain.compile import ImageVerification

# Signature checks: (task, image) pairs in, one result per pair out (see secureml.supplychain.compile).
ImageVerifier = Callable[[Sequence[tuple[str, str]]], Sequence["ImageVerification"]]
# A digest-pinned image -> its ENTRYPOINT and CMD (secureml.supplychain.entrypoint.image_process).
EntrypointResolver = Callable[[str], Any]


class CompileError(SecuremlError):
    """The pipeline breaks the tenant's rules; `violations` lists every one (task, rule, what, fix)."""

    def __init__(self, pipeline: str, violations: list[Violation]) -> None:
        self.violations = violations
        lines = [f"  {v.task}: [{v.rule}] {v.what}\n      fix: {v.fix}" for v in violations]
        super().__init__(
            f"pipeline {pipeline!r} breaks {len(violations)} rule(s) of the tenant profile\n"
            + "\n".join(lines),
            fix="fix each task as shown; docs/rules.md explains every rule id",
        )

    def diagnostics(self) -> str:
        return self.what + f"\n  fix: {self.fix}"


@dataclass
class StepReport:
    """What the compiler decided for one task: the row of the compliance table."""

    task: str
    step: str  # the secureml.dev/step label (nested pipeline steps carry their pipeline's name)
    kind: str  # "secure" (@secure_component), "plain" (profile defaults), "importer", "platform"
    image: str = ""
    isolation: str = contract.ISOLATION_NONE
    gpu_request: dict[str, Any] | None = None
    resources: str = ""  # e.g. "nvidia.com/mig-1g.10gb x1", or "claim secureml-mig-1g-10gb"
    scheduling: list[str] = field(default_factory=list)  # node selectors / affinity / tolerations
    mounts: list[str] = field(default_factory=list)  # every mount of `main`: "path <- kind name"
    spiffe_id: str | None = None
    controls: list[str] = field(default_factory=list)
    signature: dict[str, Any] | None = None
    trainjob: dict[str, Any] | None = None  # a trainer step's TrainJob (docs/trainer.md)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class CompiledPipeline:
    """The result of a successful compile."""

    name: str
    yaml_text: str
    profile: str
    steps: list[StepReport]
    admission_checked: bool = False
    component: GraphComponent | None = None  # the secured pipeline, e.g. to submit with kfp.Client

    def report(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "profile": self.profile,
            "result": "compliant",
            "admissionChecked": self.admission_checked,
            "steps": [step.to_dict() for step in self.steps],
            "violations": [],
        }

    def write(self, path: str | Path) -> None:
        save_text(path, self.yaml_text)


@dataclass
class _Context:
    profile: TenantProfile
    pipeline: str
    violations: list[Violation] = field(default_factory=list)
    steps: list[StepReport] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (task, image) for signatures
    secured_graphs: dict[int, GraphComponent] = field(default_factory=dict)
    failed_graphs: set[int] = field(
        default_factory=set
    )  # nested pipelines with violations reported
    entrypoints: EntrypointResolver | None = None
    resolved: dict[str, Any] = field(default_factory=dict)  # image -> ImageProcess or error
    trainer_argv: dict[str, list[str]] = field(default_factory=dict)  # step -> command, preview


# kfp records the pipeline being traced in a class attribute: two traces at once would mix
_KFP_TRACING = threading.Lock()


class _AbortBuildError(Exception):
    """Stop kfp's build: violations were found, the spec will not be written."""


def compile_pipeline(
    pipeline: GraphComponent,
    profile: TenantProfile,
    *,
    image_verifier: ImageVerifier | None = None,
    check_admission: bool = True,
    entrypoint_resolver: EntrypointResolver | None = None,
    keep_component: bool = True,
) -> CompiledPipeline:
    """Check and secure `pipeline` (a `@dsl.pipeline` object) for `profile`.

    Raise `CompileError` with every violation, or return the compiled YAML and the per-step report.
    `image_verifier` (e.g. a closure over `secureml.supplychain.compile.verify_images_for_compile`)
    checks the images' signatures; without it, signatures are not looked at.
    `entrypoint_resolver` (`secureml.supplychain.entrypoint.image_process`) reads the ENTRYPOINT
    of a command-less container component's image, which then becomes the task's command behind
    the launcher; without it such a task is refused (`launcher.no-command`).
    `keep_component=False` (the CLI): the result has no `component`, and kfp's built objects are
    released once the documents are made (kept for kfp's own writer where it writes the YAML),
    their reference cycles collected, so that the YAML text and the admission check's memory (the
    rule engine's programs, the pods) reuse theirs.
    """
    from kfp.dsl.graph_component import GraphComponent

    if not isinstance(pipeline, GraphComponent):
        raise SecuremlError(
            f"{pipeline!r} is not a pipeline",
            why="secureml compiles pipelines made with @dsl.pipeline",
            fix="decorate the pipeline function with @dsl.pipeline",
        )
    ctx = _Context(profile=profile, pipeline=pipeline.name, entrypoints=entrypoint_resolver)
    try:
        with _KFP_TRACING, retracing():  # kfp traces one pipeline per process at a time
            secured = _secure_graph(pipeline, ctx, step_prefix="")
    except _AbortBuildError:
        secured = None
    if image_verifier is not None and ctx.images:
        _apply_signatures(ctx, image_verifier(ctx.images))
    if ctx.violations or secured is None:
        raise CompileError(pipeline.name, ctx.violations)
    documents = _documents(secured)
    write_yaml = _yaml_writer(secured, documents)
    if not keep_component:
        # the protos kfp built (its traced tasks are cycles) collected here, before the YAML is
        # written: the text then takes their memory (peak RSS at 500 steps about 2 MiB lower)
        secured = None
        gc.collect()
    yaml_text = write_yaml()
    if check_admission:
        _check_admission(documents, profile, ctx)
        if ctx.violations:
            raise CompileError(pipeline.name, ctx.violations)
    return CompiledPipeline(
        pipeline.name, yaml_text, profile.metadata.name, ctx.steps, check_admission, secured
    )


def _documents(component: GraphComponent) -> list[dict[str, Any]]:
    """The pipelineSpec and (when there is one) platformSpec documents kfp writes (`MessageToDict`
    of its protos, written by `secureml._kfp.proto_dict`, about 1.7 times faster)."""
    from secureml._kfp.proto_dict import message_dict

    documents = [message_dict(component.pipeline_spec)]
    if component.platform_spec.platforms:
        documents.append(message_dict(component.platform_spec))
    return documents


def _yaml_writer(component: GraphComponent, documents: list[dict[str, Any]]) -> Callable[[], str]:
    """What writes the pipeline YAML, as `kfp.compiler.Compiler().compile` writes it: kfp's
    comment header and the pipelineSpec and platformSpec documents (`MessageToDict` of kfp's
    protos, keys sorted). It holds the component only where kfp's own writer is needed.

    The documents are written by `secureml.compile.yaml_writer` (the same data, strings quoted or in literal
    blocks where kfp's PyYAML folds them, several times faster); a pipeline whose importer
    downloads to a workspace goes through kfp's own writer, which validates that.
    """
    from kfp.compiler import pipeline_spec_builder as builder

    from secureml.compile.yaml_writer import dump_documents

    pipeline_dict = documents[0]
    if _downloads_to_workspace(pipeline_dict):
        return functools.partial(_kfp_yaml, component)
    header: str = builder.extract_comments_from_pipeline_spec(pipeline_dict, component.description)
    return lambda: header + dump_documents(documents)


def _kfp_yaml(component: GraphComponent) -> str:
    from kfp import compiler

    with tempfile.TemporaryDirectory(prefix="secureml-compile-") as tmp:
        path = Path(tmp) / "pipeline.yaml"
        compiler.Compiler().compile(component, str(path))
        return path.read_text(encoding="utf-8")


def _downloads_to_workspace(pipeline_dict: dict[str, Any]) -> bool:
    executors = pipeline_dict.get("deploymentSpec", {}).get("executors", {})
    return any(spec.get("importer", {}).get("downloadToWorkspace") for spec in executors.values())


# --- re-tracing ---------------------------------------------------------------------------------


def _secure_graph(component: GraphComponent, ctx: _Context, step_prefix: str) -> GraphComponent:
    """A new GraphComponent: `component`'s function traced again with every task secured."""
    from kfp.dsl import pipeline_context, structures
    from kfp.dsl.graph_component import GraphComponent
    from kfp.pipeline_spec import pipeline_spec_pb2

    from secureml._kfp.deferred import display_name_of, spec_of

    func = component.pipeline_func
    for inner in referenced_graphs(func):
        key = id(spec_of(inner))
        if inner is component or key in ctx.secured_graphs or key in ctx.failed_graphs:
            continue
        try:
            ctx.secured_graphs[key] = _secure_graph(inner, ctx, f"{inner.name}.")
        except _AbortBuildError:
            ctx.failed_graphs.add(key)

    tasks: dict[str, PipelineTask] = {}

    @functools.wraps(func)
    def traced(*args: Any, **kwargs: Any) -> Any:
        outputs = func(*args, **kwargs)
        dsl_pipeline = pipeline_context.Pipeline.get_default_pipeline()
        tasks.update(dsl_pipeline.tasks)
        for name, task in dsl_pipeline.tasks.items():
            _secure_task(name, task, ctx, step_prefix)
        if ctx.violations:
            raise _AbortBuildError
        return outputs

    # the user's pipeline as kfp's build saw it, unbuilt where `secureml compile` deferred it
    spec = dataclasses.replace(
        spec_of(component),
        implementation=structures.Implementation(),
        platform_spec=pipeline_spec_pb2.PlatformSpec(),
    )
    display_name = display_name_of(component)
    graph = GraphComponent(
        spec, traced, display_name=display_name, pipeline_config=component.pipeline_config
    )
    restore_own_configs(graph, tasks)  # kfp's merge of a nested pipeline can overwrite them
    return graph


# --- one task -----------------------------------------------------------------------------------


def _secure_task(name: str, task: PipelineTask, ctx: _Context, step_prefix: str) -> None:
    # The qualified name (`inner.score` for a nested pipeline's `score`) names the task in the
    # table, the violations and the report, as the step label and the audit records do.
    name = f"{step_prefix}{name}"
    step = contract.label_value(name)
    if task.pipeline_spec is not None:
        secured = ctx.secured_graphs.get(id(task.component_spec))
        if id(task.component_spec) in ctx.failed_graphs:
            return
        if secured is None:
            ctx.violations.append(
                Violation(
                    "pipeline.nested-unresolved",
                    f"nested pipeline {task.component_spec.name!r} is not reachable by name from the "
                    "pipeline function, so its steps cannot be secured",
                    "define or import the nested pipeline at module level and call it by that name",
                    task=name,
                )
            )
            return
        task.component_spec = secured.component_spec
        task.pipeline_spec = secured.pipeline_spec
        return
    if task.container_spec is None:  # importer: runs inside KFP's own driver, no user code
        ctx.steps.append(StepReport(task=name, step=step, kind="importer"))
        from secureml.compile.modelcar import oci_importer_violation

        if (oci := oci_importer_violation(name, task)) is not None:
            ctx.violations.append(oci)
        return
    if task.container_spec.image in contract.KFP_PLATFORM_OP_IMAGES:  # CreatePVC / DeletePVC
        ctx.steps.append(StepReport(task=name, step=step, kind="platform"))
        return
    if not task.container_spec.command and ctx.entrypoints is not None:
        if not _command_from_image(name, task, ctx):
            return
    view = _view(name, task)
    found = check_task(view, ctx.profile)
    if view.settings is not None and view.settings.trains:
        from secureml.compile.trainer_rules import check_trainer_step

        check_trainer_step(
            view.settings,
            task_gpu_request(view, ctx.profile),
            view.command + view.args,
            len(task.component_spec.outputs or {}),
            ctx.profile,
            lambda rule, what, fix: found.append(Violation(rule, what, fix, task=name)),
        )
    if found:
        ctx.violations.extend(_explain_default_image(view, found))
        return
    report = _apply(task, view, step, ctx)
    ctx.images.append((name, report.image))
    ctx.steps.append(report)


def _command_from_image(name: str, task: PipelineTask, ctx: _Context) -> bool:
    """Write a command-less container task's argv as the image runs it (ENTRYPOINT, then the
    task's args or else the image's CMD) as its command, so the launcher can wrap it; False (and
    a `launcher.no-command` violation) when the image's process cannot be read."""
    container = task.container_spec
    image = container.image
    if image not in ctx.resolved:
        try:
            ctx.resolved[image] = ctx.entrypoints(image) if ctx.entrypoints else None
        except SecuremlError as err:
            ctx.resolved[image] = err
    found = ctx.resolved[image]
    if isinstance(found, SecuremlError) or found is None:
        reason = found.what if isinstance(found, SecuremlError) else "no resolver"
        fix = found.fix if isinstance(found, SecuremlError) else ""
        ctx.violations.append(
            Violation(
                "launcher.no-command",
                f"the component has no command and its image's ENTRYPOINT could not be read: {reason}",
                fix or "give the container component an explicit command=[...]",
                task=name,
            )
        )
        return False
    args = list(container.args or [])
    if found.entrypoint:
        container.command = list(found.entrypoint)
        container.args = args or list(found.cmd)
    else:  # no ENTRYPOINT: the args (or else CMD) are the whole argv
        container.command = args or list(found.cmd)
        container.args = []
    if not container.command:
        ctx.violations.append(
            Violation(
                "launcher.no-command",
                f"the component has no command and image {image} has neither ENTRYPOINT nor CMD",
                "give the container component an explicit command=[...]",
                task=name,
            )
        )
        return False
    return True


def _explain_default_image(view: TaskView, found: list[Violation]) -> list[Violation]:
    """Image violations of a component that set no image name the default it fell back to (kfp's
    `python:3.11`), not an image the user never wrote, and say how to set one."""
    from secureml._kfp import default_base_image

    default = default_base_image()
    if view.image != default:
        return found
    return [
        dataclasses.replace(
            v,
            what=f"{v.what}: it is kfp's default base image, used because the component sets no "
            "image",
            fix="set image='REGISTRY/REPOSITORY@sha256:<digest>' on @secure_component "
            "(base_image= on @dsl.component) to an image under an allowed registry",
        )
        if v.rule.startswith("image.")
        else v
        for v in found
    ]


def _view(name: str, task: PipelineTask) -> TaskView:
    container = task.container_spec
    resources = container.resources
    k8s = task.platform_config.get("kubernetes", {})
    env_names: list[str] = []
    for secret in k8s.get("secretAsEnv", []):
        env_names += [item.get("envVar", "") for item in secret.get("keyToEnv", [])]
    for config_map in k8s.get("configMapAsEnv", []):
        env_names += [item.get("envVar", "") for item in config_map.get("keyToEnv", [])]
    env_names += [item.get("name", "") for item in k8s.get("fieldPathAsEnv", [])]
    metadata = k8s.get("podMetadata", {})
    return TaskView(
        name=name,
        image=container.image or "",
        command=tuple(container.command or ()),
        args=tuple(container.args or ()),
        env=dict(container.env or {}),
        accelerator_type=resources.accelerator_type if resources is not None else None,
        accelerator_limit=resources.accelerator_count if resources is not None else None,
        settings=settings_of(task.component_spec),
        k8s_env_names=tuple(env_names),
        k8s_labels=dict(metadata.get("labels", {})),
        k8s_annotations=dict(metadata.get("annotations", {})),
        k8s_scheduling_from_parameter=_scheduling_from_parameter(k8s),
    )


# kfp.kubernetes call -> (platform config key, the key of its JSON input inside each entry)
_SCHEDULING_JSON = {
    "add_toleration_json": ("tolerations", "tolerationJson"),
    "add_node_affinity_json": ("nodeAffinity", "nodeAffinityJson"),
    "add_node_selector_json": ("nodeSelector", "nodeSelectorJson"),
}


def _scheduling_from_parameter(k8s: dict[str, Any]) -> tuple[str, ...]:
    """The kfp.kubernetes scheduling calls of a task whose JSON is a parameter, not a literal."""
    found = []
    for call, (key, json_key) in _SCHEDULING_JSON.items():
        entries = k8s.get(key, [])
        for entry in entries if isinstance(entries, list) else [entries]:
            spec = entry.get(json_key)
            if spec is not None and "runtimeValue" not in spec:
                found.append(call)
    return tuple(sorted(set(found)))


def _task_scheduling(k8s: dict[str, Any]) -> list[str]:
    """What the task itself asks of the scheduler (kfp.kubernetes), as the report lists it."""
    shown = [f"task sets {k}={v}" for k, v in k8s.get("nodeSelector", {}).get("labels", {}).items()]
    for term in k8s.get("nodeAffinity", []):
        kind = "preferred" if term.get("weight") else "required"
        for expression in [*term.get("matchExpressions", []), *term.get("matchFields", [])]:
            values = ", ".join(expression.get("values", []))
            shown.append(
                f"task sets {kind} {expression.get('key')} {expression.get('operator')} ({values})"
            )
        if "nodeAffinityJson" in term:
            shown.append(f"task sets node affinity {json.dumps(term['nodeAffinityJson'])}")
    for toleration in k8s.get("tolerations", []):
        if "tolerationJson" in toleration:
            shown.append(f"task tolerates {json.dumps(toleration['tolerationJson'])}")
            continue
        parts = (str(toleration.get(k, "")) for k in ("key", "operator", "value", "effect"))
        shown.append("task tolerates " + ":".join(parts))
    return shown


def _scratch_volume(path: str) -> str:
    return contract.label_value("scratch" + path.replace("/", "-")).lower()[:63] or "scratch"


def _apply(task: PipelineTask, view: TaskView, step: str, ctx: _Context) -> StepReport:
    """Write the tenant's controls into `task` (already checked)."""
    from secureml.compile.k8s_config import TaskConfig
    from secureml.core.image_ref import ImageRef

    profile = ctx.profile
    spec = profile.spec
    settings = view.settings
    request = task_gpu_request(view, profile)  # gpu=, or kfp's own set_accelerator_type/limit
    trains = settings is not None and settings.trains
    # A trainer step's pod only submits the TrainJob: the GPUs go to the job's nodes.
    step_request = None if trains else request
    placed = gpu.placement(step_request, profile)
    # The fully qualified reference (docker.io/library/python:3.11 for python:3.11): what the
    # compile rules judged is then literally what the admission policy and the runtime see.
    ref = ImageRef.parse(view.image)
    image = str(ref)
    task.container_spec.image = image  # set_container_image without its inspect.stack() cost
    report = StepReport(
        task=view.name,
        step=step,
        kind="secure" if settings else "plain",
        image=image,
        isolation=placed.isolation,
    )

    _write_resources(task, placed, report)
    spiffe_id = profile.spiffe_id(ctx.pipeline, step)
    shim_on = placed.isolation == ISOLATION_TIMESLICE_SHIM
    config = TaskConfig(task)  # what the kfp.kubernetes setters write, parsed and written once
    _write_scheduling(config, placed, report)
    _write_labels(config, ctx, step, placed, report)
    _write_annotations(config, ctx, spiffe_id, ref.digest, step_request, shim_on, report)
    scratch = _write_pod_security(config, ctx, settings)
    verify_env = _verify_inputs_settings(config, ctx, settings, report)
    config.write()
    has_gpu = step_request is not None
    identity = spec.identity
    env = _launcher_env(ctx, step, placed.isolation, image, spiffe_id, step_request, shim_on)
    env.update(verify_env)
    # What task.set_env_variable does, in one step: kfp's setters call inspect.stack() each time,
    # which made this loop the largest cost of compiling a long pipeline.
    task.container_spec.env = {**(task.container_spec.env or {}), **env}

    command = list(view.command)
    if trains:
        assert settings is not None
        command = _trainer_submit(ctx, view, settings, step, image, ref.digest, request, report)
    task.container_spec.command = [*runtime_image.launcher_prefix(profile), *command]

    report.spiffe_id = spiffe_id if identity.required else None
    report.controls = _controls(profile, has_gpu, shim_on, scratch)
    if contract.ENV_VERIFY_INPUTS in env:  # e.g. "verify model"
        names = [i["name"] for i in json.loads(env[contract.ENV_VERIFY_INPUTS])]
        report.controls.append("verify " + ",".join(names))
    if trains:
        report.controls.append(f"trainjob {settings.nodes if settings else 1} node(s)")
    return report


def _trainer_submit(
    ctx: _Context,
    view: TaskView,
    settings: SecureSettings,
    step: str,
    image: str,
    digest: str | None,
    request: GPURequest | None,
    report: StepReport,
) -> list[str]:
    """A trainer step: the TrainJob its nodes run (in the report), and the submitter's command
    that creates it with the step's command behind the launcher on every node."""
    from secureml.trainer import manifest, submit

    profile = ctx.profile
    placed = gpu.placement(request, profile)
    spiffe_id = profile.spiffe_id(ctx.pipeline, step)
    scratch = tuple(
        dict.fromkeys([*profile.spec.hardening.scratch_mounts, *settings.scratch_mounts])
    )
    node = manifest.NodeSpec(
        pipeline=ctx.pipeline,
        step=step,
        image=image,
        digest=digest,
        nodes=settings.nodes,
        runtime=settings.trainer_runtime or "",
        request=request,
        placement=placed,
        env=_launcher_env(ctx, step, placed.isolation, image, spiffe_id, request, False),
        scratch=scratch,
        launcher=runtime_image.launcher_prefix(profile),
        timeout_seconds=settings.timeout_seconds,
    )
    trainjob = manifest.trainjob_manifest(profile, node)
    report.trainjob = trainjob
    report.isolation = placed.isolation
    per_node = f"{placed.accelerator_type} x{placed.accelerator_count}" if request else "no GPU"
    report.resources = f"{settings.nodes} node(s), each {per_node}"
    ctx.trainer_argv[step] = list(view.command)
    return submit.submit_command(trainjob, list(view.command))


def _write_resources(task: PipelineTask, placed: gpu.Placement, report: StepReport) -> None:
    """The GPU as kfp's accelerator fields (what set_accelerator_type/limit write, see the module
    docstring), or none where a DRA claim replaces a kfp-native request."""
    from kfp.dsl import structures

    if placed.accelerator_type:
        resources = task.container_spec.resources or structures.ResourceSpec()
        resources.accelerator_type = placed.accelerator_type
        resources.accelerator_count = str(placed.accelerator_count)
        task.container_spec.resources = resources
        report.resources = f"{placed.accelerator_type} x{placed.accelerator_count}"
    elif task.container_spec.resources is not None:
        task.container_spec.resources.accelerator_type = None
        task.container_spec.resources.accelerator_count = None


def _write_scheduling(config: TaskConfig, placed: gpu.Placement, report: StepReport) -> None:
    """The task's own placement first (admission judges it on the preview), then the compiler's."""
    report.scheduling += _task_scheduling(config.task.platform_config.get("kubernetes", {}))
    for key, value in placed.node_selector.items():
        config.add_node_selector(key, value)
        report.scheduling.append(f"{key}={value}")
    if placed.node_affinity:
        config.add_node_affinity(placed.node_affinity)
        report.scheduling += [
            f"{e['key']} {e['operator']} ({', '.join(e['values'])})" for e in placed.node_affinity
        ]
    for toleration in placed.tolerations:
        config.add_toleration(**toleration)
        report.scheduling.append(
            "tolerates " + ":".join(str(toleration.get(k, "")) for k in ("key", "value", "effect"))
        )


def _write_labels(
    config: TaskConfig, ctx: _Context, step: str, placed: gpu.Placement, report: StepReport
) -> None:
    """The pod labels admission keys on: tenant, pipeline, step, isolation, the GPU claim."""
    labels = {
        contract.LABEL_TENANT: contract.label_value(ctx.profile.metadata.name),
        contract.LABEL_PIPELINE: contract.label_value(ctx.pipeline),
        contract.LABEL_STEP: step,
        contract.LABEL_ISOLATION: placed.isolation,
        **placed.pod_labels,
    }
    if contract.LABEL_GPU_CLAIM in placed.pod_labels:
        report.resources = f"claim {placed.pod_labels[contract.LABEL_GPU_CLAIM]}"
    for key, value in labels.items():
        config.add_pod_label(key, value)


def _write_annotations(
    config: TaskConfig,
    ctx: _Context,
    spiffe_id: str,
    digest: str | None,
    request: GPURequest | None,
    shim_on: bool,
    report: StepReport,
) -> None:
    """The pod annotations: SPIFFE ID, image digest, GPU request and the shim's limits file."""
    annotations = {contract.ANNOTATION_SPIFFE_ID: spiffe_id}
    if digest:
        annotations[contract.ANNOTATION_IMAGE_DIGEST] = digest
    time_slice = request if isinstance(request, TimeSlice) else None
    if request is not None:
        annotations[contract.ANNOTATION_GPU_REQUEST] = request.to_json()
        report.gpu_request = json.loads(request.to_json())
        if gpu.confidential_selector(ctx.profile):
            annotations[contract.ANNOTATION_CONFIDENTIAL_COMPUTING] = (
                contract.CONFIDENTIAL_COMPUTING_REQUIRED
            )
    if time_slice is not None and shim_on:
        annotations[contract.ANNOTATION_LIMITS] = contract.render_shim_limits(
            memory_bytes=time_slice.memory_bytes,
            compute_percent=time_slice.compute,
            scrub_on_free=ctx.profile.spec.runtime.scrub_on_free,
            firewall=ctx.profile.cuda_firewall(),
        )
    for key, value in annotations.items():
        config.add_pod_annotation(key, value)


def _write_pod_security(
    config: TaskConfig, ctx: _Context, settings: SecureSettings | None
) -> list[str]:
    """User and group, non-root, the scratch emptyDirs (returned) and the step's timeout."""
    hardening = ctx.profile.spec.hardening
    config.set_security_context(
        run_as_user=hardening.run_as_user, run_as_group=hardening.run_as_group
    )
    scratch = list(
        dict.fromkeys([*hardening.scratch_mounts, *(settings.scratch_mounts if settings else ())])
    )
    for path in scratch:
        config.empty_dir_mount(volume_name=_scratch_volume(path), mount_path=path)
    if settings and settings.timeout_seconds:
        config.set_timeout(settings.timeout_seconds)
    return scratch


def _launcher_env(
    ctx: _Context,
    step: str,
    isolation: str,
    image: str,
    spiffe_id: str,
    request: GPURequest | None,
    shim_on: bool,
) -> dict[str, str]:
    """The launcher's `SECUREML_*` settings (enforcement/config.py reads them)."""
    profile = ctx.profile
    spec = profile.spec
    has_gpu = request is not None
    identity = spec.identity
    env = {
        contract.ENV_TENANT: profile.metadata.name,
        contract.ENV_NAMESPACE: spec.namespace,
        contract.ENV_PIPELINE: ctx.pipeline,
        contract.ENV_STEP: step,
        contract.ENV_ISOLATION: isolation,
        contract.ENV_IMAGE: image,
        contract.ENV_IDENTITY_REQUIRED: _flag(identity.required),
        contract.ENV_EXPECTED_SPIFFE_ID: spiffe_id,
        contract.ENV_SCRUB_BEFORE: _flag(has_gpu and spec.scrub.before),
        contract.ENV_SCRUB_AFTER: _flag(has_gpu and spec.scrub.after),
        contract.ENV_SCRUB_VERIFY: spec.scrub.verify if has_gpu else "off",
        contract.ENV_SHIM_MODE: "enforce" if shim_on else "off",
    }
    if request is not None:
        env[contract.ENV_GPU_REQUEST] = request.to_json()
        if gpu.confidential_selector(profile):
            env[contract.ENV_CONFIDENTIAL_COMPUTING] = contract.CONFIDENTIAL_COMPUTING_REQUIRED
    if shim_on:
        env[contract.ENV_SHIM_LIMITS_FILE] = contract.SHIM_LIMITS_PATH
    if identity.required:
        env[contract.SPIFFE_SOCKET_ENV] = f"unix://{identity.socket_path}"
    return env


def _verify_inputs_settings(
    config: TaskConfig, ctx: _Context, settings: SecureSettings | None, report: StepReport
) -> dict[str, str]:
    """`verify_inputs=`: the annotation and the launcher's variables that make it verify those
    inputs' model signatures against the profile's `spec.models` (docs/supply-chain.md)."""
    from secureml.supplychain import verify_inputs
    from secureml.supplychain.model_trust import profile_trust_json

    if settings is None or not settings.verify_inputs:
        return {}
    trust = profile_trust_json(ctx.profile)
    if not trust:
        ctx.violations.append(
            Violation(
                "model.no-trusted-signers",
                "the step verifies its inputs' model signatures, but the profile trusts no model "
                "signer",
                "list the signers under spec.models.signers (issuer and subject or "
                "subjectRegExp) or their public keys under spec.models.keys",
                task=report.task,
            )
        )
        return {}
    wire = verify_inputs.to_json(settings.verify_inputs)
    config.add_pod_annotation(contract.ANNOTATION_VERIFY_INPUTS, wire)
    return {contract.ENV_VERIFY_INPUTS: wire, contract.ENV_MODEL_TRUST: trust}


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _controls(
    profile: TenantProfile, has_gpu: bool, shim_on: bool, scratch: list[str]
) -> list[str]:
    spec = profile.spec
    controls = ["launcher", f"uid {spec.hardening.run_as_user}"]
    if spec.identity.required:
        controls.append("identity")
    if spec.hardening.read_only_root_filesystem:
        controls.append("read-only root")
    if scratch:
        controls.append("scratch " + ",".join(scratch))
    if has_gpu and spec.scrub.before:
        controls.append("scrub before")
    if has_gpu and spec.scrub.after:
        controls.append("scrub after")
    if shim_on:
        controls.append("shim")
    if has_gpu and gpu.confidential_selector(profile):
        controls.append("confidential computing")
    return controls


# --- checks after the build ----------------------------------------------------------------------


def _apply_signatures(ctx: _Context, results: Sequence[ImageVerification]) -> None:
    by_task = {step.task: step for step in ctx.steps}
    for result in results:
        if result.verified:
            if result.step in by_task:
                by_task[result.step].signature = {"signer": result.signer, "issuer": result.issuer}
        else:
            ctx.violations.append(
                Violation(
                    result.rule or "image.signature-invalid",
                    result.message or "image signature check failed",
                    result.fix or "sign the image",
                    task=result.step,
                )
            )


def _mounts_of_main(pod: dict[str, Any]) -> list[str]:
    """Every volume mount of the step's `main` container as previewed (KFP's, the platform's and
    the task's own): `path <- kind name[/subPath][ (ro)]`, so a reader sees what the step mounts."""
    kinds = {
        volume.get("name"): next((k for k in volume if k != "name"), "?")
        for volume in pod.get("spec", {}).get("volumes", [])
    }
    main: dict[str, Any] = next(
        (c for c in pod["spec"]["containers"] if c.get("name") == contract.KFP_MAIN_CONTAINER), {}
    )
    out = []
    for mount in main.get("volumeMounts", []):
        name = mount.get("name", "")
        sub = f"/{mount['subPath']}" if mount.get("subPath") else ""
        read_only = " (ro)" if mount.get("readOnly") else ""
        out.append(f"{mount.get('mountPath', '')} <- {kinds.get(name, '?')} {name}{sub}{read_only}")
    return out


def _check_admission(
    documents: list[dict[str, Any]], profile: TenantProfile, ctx: _Context
) -> None:
    """Evaluate the tenant's admission rules on every previewed pod (the rule engine is part of
    the package: an installation without it is broken, and fails here rather than skip the check)."""
    from secureml.pods.preview import iter_preview_pods
    from secureml.rules import evaluate, rules_for_profile

    rules = rules_for_profile(profile)
    requirement = {rule.id: rule.message for rule in rules}
    reports = {step.step: step for step in ctx.steps}
    # the documents as written, without a YAML round trip; each pod judged, then dropped
    for path, pod in iter_preview_pods(documents, profile):
        # a preview is keyed by its DAG path (`inner/score`); its step label names the task
        label = pod.get("metadata", {}).get("labels", {}).get(contract.LABEL_STEP)
        report = reports.get(label) if label else None
        task = report.task if report is not None else path
        if report is not None:
            report.mounts = _mounts_of_main(pod)
        for violation in evaluate(pod, rules):
            ctx.violations.append(
                dataclasses.replace(
                    violation,
                    task=task,
                    fix=f"change the task to meet {violation.rule}, which the cluster enforces: "
                    f"{requirement[violation.rule]} (docs/admission-rules.md)",
                )
            )
    _check_trainer_nodes(profile, ctx, rules)


def _check_trainer_nodes(profile: TenantProfile, ctx: _Context, rules: Sequence[Any]) -> None:
    """The tenant's rules on the node pods of every trainer step's TrainJob (as Trainer and
    JobSet would create them, mutated as the bundle's MAP would)."""
    from secureml.pods.mutation.apply import apply_mutations
    from secureml.rules import evaluate
    from secureml.trainer.manifest import NAME_PLACEHOLDER, with_run
    from secureml.trainer.pods import node_pods

    for report in ctx.steps:
        if report.trainjob is None:
            continue
        job = with_run(report.trainjob, NAME_PLACEHOLDER, ctx.trainer_argv.get(report.step, []))
        seen: set[tuple[str, str]] = set()
        for pod in node_pods(job):
            for violation in evaluate(apply_mutations(pod, profile), rules):
                if (violation.rule, violation.what) in seen:
                    continue
                seen.add((violation.rule, violation.what))
                ctx.violations.append(
                    dataclasses.replace(
                        violation,
                        task=f"{report.task} (trainer node)",
                        fix="see docs/trainer.md and docs/admission-rules.md for this rule",
                    )
                )
