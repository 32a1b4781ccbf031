"""`secureml run --local`: a pipeline run on this machine with a cluster's runtime checks."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from secureml._kfp.local_tasks import TaskHook, per_task_env
from secureml.components.audit_report import SIMULATION_MARKER
from secureml.core import contract
from secureml.core.errors import InputError, SecuremlError
from secureml.gpu.request import MIG, GPURequest, TimeSlice, decode_gpu_request
from secureml.localrun.runlog import ANSI, LOG_FILE, captured_output

if TYPE_CHECKING:
    from secureml.enforcement.audit import AuditRecord
    from secureml.localrun.dev_identity import DevWorkloadAPI, Workload
    from secureml.profile.model import TenantProfile

AUDIT_SUBDIR = "audit"
IDENTITY_SUBDIR = "identity"
PODINFO_SUBDIR = "podinfo"
ROOT_SUBDIR = "pipeline-root"
COMPILED_FILE = "pipeline.yaml"


# kfp.kubernetes settings that hand a step a cluster's objects (the executor config's fields): a
# local run has none of them, and kfp.local ignores the settings, so the step would start without.
CLUSTER_INPUTS = {
    "secretAsVolume": "a Secret as a volume",
    "secretAsEnv": "a Secret as environment variables",
    "configMapAsVolume": "a ConfigMap as a volume",
    "configMapAsEnv": "a ConfigMap as environment variables",
    "pvcMount": "a PersistentVolumeClaim mount",
    "genericEphemeralVolume": "a generic ephemeral volume",
}


@dataclass
class LocalStep:
    """One executor of the compiled pipeline, with what the cluster would know about it."""

    executor: str
    tasks: list[str]
    container: dict[str, Any]
    annotations: dict[str, str]
    cluster_inputs: tuple[
        str, ...
    ] = ()  # kfp.kubernetes inputs only a cluster has (CLUSTER_INPUTS)

    @property
    def name(self) -> str:
        return ", ".join(self.tasks) or self.executor

    @property
    def env(self) -> dict[str, str]:
        return {item["name"]: str(item.get("value", "")) for item in self.container.get("env", [])}

    @property
    def launcher_prefix(self) -> tuple[str, ...] | None:
        """The launcher the command starts with: the in-image one, the injected one, or none."""
        command = [*self.container.get("command", [])]
        for prefix in (contract.LAUNCHER_PREFIX, contract.RUNTIME_LAUNCHER_PREFIX):
            if command[: len(prefix)] == list(prefix):
                return prefix
        return None

    @property
    def under_launcher(self) -> bool:
        return self.launcher_prefix is not None

    def use_local_launcher(self) -> None:
        """Run the in-venv launcher where the compiler wrote the injected one (a local run has
        no platform runtime image; `python3 -m secureml.enforcement.launch` behaves the same)."""
        if self.launcher_prefix == contract.RUNTIME_LAUNCHER_PREFIX:
            command = self.container["command"][len(contract.RUNTIME_LAUNCHER_PREFIX) :]
            self.container["command"] = [*contract.LAUNCHER_PREFIX, *command]

    @property
    def lightweight_python(self) -> bool:
        """Whether kfp.local's SubprocessRunner can run the command after the launcher prefix."""
        from kfp.dsl import component_factory

        command = [
            *self.container.get("command", [])[len(self.launcher_prefix or ()) :],
            *self.container.get("args", []),
        ]
        prefix = component_factory.CONTAINERIZED_PYTHON_COMPONENT_COMMAND
        if command[: len(prefix)] == prefix:
            return False
        return any(component_factory.EXECUTOR_MODULE in part for part in command)

    @property
    def trainjob(self) -> dict[str, Any] | None:
        """A trainer step's TrainJob (docs/trainer.md), from its submitter's command; else None."""
        from secureml.trainer.submit import trainjob_of

        return trainjob_of(self.container.get("command", []))

    @property
    def gpu_request(self) -> GPURequest | None:
        raw = self.env.get(contract.ENV_GPU_REQUEST)
        return decode_gpu_request(raw, where=f"step {self.name}") if raw else None

    @property
    def identity_required(self) -> bool:
        return self.env.get(contract.ENV_IDENTITY_REQUIRED, "").lower() == "true"

    def set_env(self, values: Mapping[str, str]) -> None:
        """Set (or replace) variables in the step's container env of the compiled spec."""
        env = [item for item in self.container.get("env", []) if item["name"] not in values]
        env += [{"name": name, "value": value} for name, value in values.items()]
        self.container["env"] = env


@dataclass
class LocalPipeline:
    """The two documents of a compiled pipeline file: the pipeline spec and the platform spec."""

    spec: dict[str, Any]
    platform: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_text(cls, text: str, *, source: str) -> LocalPipeline:
        documents = [doc for doc in yaml.safe_load_all(text) if doc]
        if not documents or "deploymentSpec" not in documents[0]:
            raise InputError(f"{source} is not a compiled KFP pipeline", where=source)
        return cls(spec=documents[0], platform=documents[1] if len(documents) > 1 else {})

    @property
    def name(self) -> str:
        return str(self.spec.get("pipelineInfo", {}).get("name", "pipeline"))

    def steps(self) -> list[LocalStep]:
        executors = self.spec["deploymentSpec"]["executors"]
        tasks_of: dict[str, list[str]] = {}
        components = self.spec.get("components", {})
        dags = [self.spec.get("root", {})] + [c for c in components.values() if "dag" in c]
        for dag in dags:
            for task_name, task in dag.get("dag", {}).get("tasks", {}).items():
                component = components.get(task.get("componentRef", {}).get("name", ""), {})
                label = component.get("executorLabel")
                if label:
                    tasks_of.setdefault(label, []).append(task_name)
        k8s = self.platform.get("platforms", {}).get("kubernetes", {})
        k8s_executors = k8s.get("deploymentSpec", {}).get("executors", {})
        return [
            LocalStep(
                executor=label,
                tasks=sorted(tasks_of.get(label, [])),
                container=executor["container"],
                annotations=dict(
                    k8s_executors.get(label, {}).get("podMetadata", {}).get("annotations", {})
                ),
                cluster_inputs=tuple(
                    what
                    for field, what in CLUSTER_INPUTS.items()
                    if k8s_executors.get(label, {}).get(field)
                ),
            )
            for label, executor in sorted(executors.items())
            if "container" in executor
        ]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.spec, sort_keys=True)


@dataclass(frozen=True)
class RunLayout:
    """Where one local run keeps its files."""

    root: Path

    @property
    def audit_dir(self) -> Path:
        return self.root / AUDIT_SUBDIR

    @property
    def identity_dir(self) -> Path:
        return self.root / IDENTITY_SUBDIR

    @property
    def pipeline_root(self) -> Path:
        return self.root / ROOT_SUBDIR

    @property
    def compiled(self) -> Path:
        return self.root / COMPILED_FILE

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE

    def limits_file(self, executor: str) -> Path:
        return self.root / PODINFO_SUBDIR / contract.label_value(executor) / "limits"


@dataclass
class RunResult:
    """What a local run did: its records, whether the pipeline finished, where the files are."""

    pipeline: str
    layout: RunLayout
    succeeded: bool
    failure: str
    records: list[AuditRecord]
    simulated_gpu: bool
    steps: list[LocalStep]

    def summary_records(self) -> list[AuditRecord]:
        """The records as the summary names them: a step that ran in a `dsl.ParallelFor`
        iteration (its record under `DIR/audit/<loop>-iteration-<i>/`) as `step [<loop>-iteration-<i>]`."""
        audit = self.layout.audit_dir.resolve()
        named: list[AuditRecord] = []
        for record in self.records:
            try:
                where = Path(str(record.get("audit_file", ""))).resolve().parent.relative_to(audit)
            except ValueError:
                where = Path()
            if where.parts:
                record = record | {"step": f"{record.get('step')} [{where.as_posix()}]"}
            named.append(record)
        return named

    @property
    def failed_steps(self) -> list[str]:
        """The qualified names (as the summary gives them) of the steps whose record says failed."""
        return [str(r.get("step")) for r in self.summary_records() if r.get("exit_code") != 0]

    @property
    def steps_without_record(self) -> list[str]:
        """Secure steps that left no audit record: not run, or the launcher died before writing."""
        recorded = {record.get("step") for record in self.records}
        names = [step.env.get(contract.ENV_STEP) or step.name for step in self.steps]
        return [name for name in names if name not in recorded]


def default_output_dir(pipeline_file: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("secureml-runs") / f"{pipeline_file.stem}-{stamp}"


def check_before_running(
    steps: list[LocalStep], *, dev_identity: bool, simulate_gpu: bool, has_gpu: bool
) -> None:
    """Refuse a run that would fail on a missing local capability, before any step starts."""
    needs_identity = [s.name for s in steps if s.identity_required]
    if needs_identity and not dev_identity:
        raise SecuremlError(
            f"the profile requires a SPIFFE identity for step(s) {', '.join(needs_identity)}, "
            "and this local run has no Workload API",
            why="the launcher fails closed when a required identity cannot be proved",
            fix="add --dev-identity: a local Workload API with a throwaway CA issues each step "
            "the ID the profile's template gives it",
        )
    gpu_steps = [f"{s.name} ({s.gpu_request.describe()})" for s in steps if s.gpu_request]
    trainer_gpus = [s.name for s in steps if _trainer_gpus(s)]
    if trainer_gpus and not has_gpu:
        raise SecuremlError(
            f"trainer step(s) {', '.join(trainer_gpus)} run their nodes on GPUs, and this machine "
            "has none",
            why="a local run starts each node as a process under the launcher, whose GPU stages "
            "need a CUDA driver; --simulate-gpu gives fake GPUs to single-pod steps only",
            fix="run a CPU-only TrainJob locally (no gpu= on the trainer step), or run on a "
            "machine with GPUs",
        )
    if gpu_steps and not simulate_gpu and not has_gpu:
        raise SecuremlError(
            f"step(s) {', '.join(gpu_steps)} need a GPU, and this machine has none",
            why="the launcher's GPU stages (preflight, scrub, shim, watchdog) need a CUDA driver",
            fix="add --simulate-gpu to run the GPU stages against the fake CUDA driver and NVML "
            "(clearly labelled as simulated), or run on a machine with a GPU",
        )
    from_cluster = [f"{s.name} ({', '.join(s.cluster_inputs)})" for s in steps if s.cluster_inputs]
    if from_cluster:
        raise SecuremlError(
            f"step(s) {'; '.join(from_cluster)} read Kubernetes objects a local run does not have",
            why="kfp.local ignores kfp.kubernetes settings: the step would start without its "
            "secret, config or volume and fail part-way through the run",
            fix="run the pipeline in a cluster (`secureml compile`, then submit it); to try it "
            "locally, pass what the step reads as a pipeline parameter instead",
        )
    platform = [
        s.name for s in steps if s.container.get("image") in contract.KFP_PLATFORM_OP_IMAGES
    ]
    if platform:
        raise SecuremlError(
            f"step(s) {', '.join(platform)} are KFP platform operations (kubernetes.CreatePVC / "
            "DeletePVC), which a local run cannot run",
            why="KFP's driver makes those Kubernetes calls in a cluster; kfp.local has no driver",
            fix="run the pipeline in a cluster (`secureml compile`, then submit it)",
        )
    outside = [s.name for s in steps if not s.under_launcher]
    if outside:
        raise SecuremlError(
            f"step(s) {', '.join(outside)} do not start under the secureml launcher",
            why="a local run exists to exercise the same runtime checks as the cluster",
            fix="compile the pipeline with `secureml compile` (it adds the launcher to every step)",
        )
    containers = [s.name for s in steps if s.under_launcher and not s.lightweight_python]
    if containers:
        raise SecuremlError(
            f"step(s) {', '.join(containers)} are container components, which a local run "
            "cannot run",
            why="kfp.local's SubprocessRunner runs only Lightweight Python Components (a Python "
            "function run by kfp's executor in this environment); a container component or a "
            "containerized Python component needs its image, which a local run does not pull",
            fix="run the pipeline in a cluster (`secureml compile`, then submit it), or write the "
            "step as a @secure_component Python function",
        )


def _trainer_gpus(step: LocalStep) -> bool:
    job = step.trainjob
    return job is not None and "resourcesPerNode" in job["spec"]["trainer"]


def machine_has_gpu() -> bool:
    """Whether NVML starts here and sees at least one device."""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # also what a missing libnvidia-ml.so raises
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    except pynvml.NVMLError:
        return False
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def apply_local_overlay(
    steps: list[LocalStep],
    layout: RunLayout,
    *,
    spiffe_endpoint: str | None,
) -> None:
    """Give each step, through its env, what a cluster would mount for it (docs/local-run.md)."""
    for step in steps:
        step.use_local_launcher()
        values = {
            contract.ENV_AUDIT_DIR: str(layout.audit_dir.resolve()),
            contract.ENV_IDENTITY_DIR: str(layout.identity_dir.resolve()),
        }
        if spiffe_endpoint is not None:
            values[contract.SPIFFE_SOCKET_ENV] = spiffe_endpoint
        if step.trainjob is not None:  # its nodes run here, as processes (secureml.trainer.submit)
            values[contract.ENV_TRAINER_LOCAL] = "1"
        limits = step.annotations.get(contract.ANNOTATION_LIMITS)
        if limits is not None:
            path = layout.limits_file(step.executor)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                path.chmod(0o644)
            path.write_text(limits)
            path.chmod(0o444)  # read-only, like the downward-API volume
            values[contract.ENV_SHIM_LIMITS_FILE] = str(path.resolve())
        step.set_env(values)


@dataclass
class GpuSimulation:
    """The fake GPU machines of a run: a fresh one for each run of a GPU task, so that the
    iterations of a `dsl.ParallelFor`, which kfp.local runs two at a time, never share a device."""

    folder: Path
    process_env: dict[str, str]
    machines: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def task_env(self, request: GPURequest, task: str) -> dict[str, str]:
        """Build the fake machine for one run of a GPU task; the env that selects it."""
        from secureml.enforcement import simulator

        with self._lock:
            directory = self.folder / f"{len(self.machines):03d}-{contract.label_value(task)}"
            machine, visible = fake_machine_for(request, directory)
            self.machines.append(machine)
        return {
            simulator.CONFIG_ENV: str(machine.config_path.resolve()),
            "CUDA_VISIBLE_DEVICES": ",".join(visible),
        }


SIMULATED_GPU_NAME = "NVIDIA A100-SXM4-80GB"
SIMULATED_SMALL_MEMORY = 256 * 2**20


def fake_machine_for(request: GPURequest, directory: Path) -> tuple[Any, list[str]]:
    """A fake GPU machine that holds what `request` asks for; and the CUDA devices to expose.

    The machine is a `secureml.enforcement.simulator.FakeGPU`. MIG instances get their profile's
    real memory (preflight checks it against the profile name); a time-sliced share gets a device
    exactly the share's size, and whole GPUs small devices. docs/local-run.md says the same.
    """
    from secureml.enforcement import simulator

    if isinstance(request, MIG):
        memory = request.memory_gb * 10**9
        migs = [
            simulator.FakeMig(profile=request.profile, memory=memory, gi=i + 1)
            for i in range(request.count)
        ]
        device = simulator.FakeDevice(
            name=SIMULATED_GPU_NAME, memory=80 * 2**30, mig_mode=True, migs=migs
        )
        return simulator.FakeGPU(directory, [device]), [mig.uuid for mig in migs]
    if isinstance(request, TimeSlice):
        device = simulator.FakeDevice(name=SIMULATED_GPU_NAME, memory=request.memory)
        return simulator.FakeGPU(directory, [device]), [device.uuid]
    product = request.product
    name = " ".join(product.split("-")) if product else SIMULATED_GPU_NAME
    devices = [
        simulator.FakeDevice(name=name, memory=SIMULATED_SMALL_MEMORY) for _ in range(request.count)
    ]
    return simulator.FakeGPU(directory, devices), [d.uuid for d in devices]


@contextlib.contextmanager
def simulated_gpus(folder: Path) -> Iterator[GpuSimulation]:
    """The fake driver built, and a `GpuSimulation` making machines under `folder`; their device
    memory files are removed afterwards."""
    from secureml.enforcement import simulator

    try:
        lib_dir = simulator.build_fake_libs()
    except (RuntimeError, OSError) as err:
        raise SecuremlError(
            "the simulated GPU could not be built",
            why=str(err),
            fix="install a C compiler (cc, gcc or clang) for --simulate-gpu, or run on a machine with a GPU",
        ) from None
    previous = os.environ.get("LD_LIBRARY_PATH")
    process_env = {"LD_LIBRARY_PATH": f"{lib_dir}:{previous}" if previous else str(lib_dir)}
    simulation = GpuSimulation(folder=folder, process_env=process_env)
    try:
        yield simulation
    finally:
        for machine in simulation.machines:
            for leftover in machine.config_path.parent.glob(machine.config_path.name + ".*"):
                leftover.unlink(missing_ok=True)


def _task_hook(layout: RunLayout, simulation: GpuSimulation | None) -> TaskHook:
    """What one run of a task gets beyond its executor's env: steps inside a `dsl.ParallelFor`
    iteration write their audit record under `DIR/audit/<loop>-iteration-<i>/` (so the summary
    can name the iteration), and each run of a GPU task gets its own simulated machine."""
    root = layout.pipeline_root.resolve()

    def hook(folder: Path, env: dict[str, str]) -> None:
        try:
            parts = folder.resolve().relative_to(root).parts[1:]  # below the run's own folder
        except ValueError:
            parts = ()
        if len(parts) > 1:
            audit = layout.audit_dir.joinpath(*parts[:-1])
            audit.mkdir(parents=True, exist_ok=True)
            env[contract.ENV_AUDIT_DIR] = str(audit.resolve())
        raw = env.get(contract.ENV_GPU_REQUEST)
        if simulation is not None and raw:
            task = "/".join(parts) or folder.name
            env.update(simulation.task_env(decode_gpu_request(raw, where=task), task))

    return hook


def identity_by_step(profile: TenantProfile) -> Callable[[Workload], str | None]:
    """The dev Workload API's registration: pipeline and step of the caller -> the profile's ID."""

    def identity(workload: Workload) -> str | None:
        pipeline = workload.env.get(contract.ENV_PIPELINE)
        step = workload.env.get(contract.ENV_STEP)
        if not pipeline or not step:
            return None
        node = workload.env.get(contract.ENV_TRAINER_NODE)  # a trainer node (docs/trainer.md)
        suffix = f"{contract.SPIFFE_NODE_SEGMENT}{node}" if node and node.isdigit() else ""
        return profile.spiffe_id(pipeline, step) + suffix

    return identity


@contextlib.contextmanager
def dev_workload_api(profile: TenantProfile, enabled: bool) -> Iterator[DevWorkloadAPI | None]:
    """A `DevWorkloadAPI` on a short socket path (unix paths are limited), or None."""
    if not enabled:
        yield None
        return
    from secureml.localrun.dev_identity import DevWorkloadAPI

    with tempfile.TemporaryDirectory(prefix="secureml-spiffe-") as folder:
        api = DevWorkloadAPI(
            Path(folder) / "agent.sock",
            spiffe_id=identity_by_step(profile),
            trust_domain=profile.spec.identity.trust_domain,
        )
        with api:
            yield api


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set variables in this process (the steps inherit them) for the duration of the run."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_compiled(
    compiled: LocalPipeline,
    profile: TenantProfile,
    layout: RunLayout,
    *,
    arguments: Mapping[str, Any] | None = None,
    dev_identity: bool = False,
    simulate_gpu: bool = False,
    verbose: bool = False,
) -> RunResult:
    """Run a compiled pipeline with kfp.local, the launcher active in every step.

    kfp.local's output goes to `DIR/run.log`, and to the terminal too when `verbose` (secureml.localrun.runlog).
    """
    from kfp import components, local

    from secureml.compile.pipeline_args import bind_arguments
    from secureml.enforcement.audit import load_audit_records

    bound = bind_arguments(compiled.spec, arguments or {}, pipeline=compiled.name)
    steps = compiled.steps()
    has_gpu = False if simulate_gpu else machine_has_gpu()
    check_before_running(
        steps, dev_identity=dev_identity, simulate_gpu=simulate_gpu, has_gpu=has_gpu
    )
    if any(layout.audit_dir.rglob("*.audit.json")):
        raise InputError(
            f"{layout.root} already holds the files of a run",
            why="the summary is made from every audit record in its audit folder",
            fix="choose another --output-dir, or remove that folder first",
        )
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.audit_dir.mkdir(exist_ok=True)
    layout.identity_dir.mkdir(mode=0o700, exist_ok=True)
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(dev_workload_api(profile, dev_identity))
        process_env: dict[str, str] = {}
        simulation = None
        if simulate_gpu and any(s.gpu_request for s in steps):
            (layout.audit_dir / SIMULATION_MARKER).write_text(
                "The GPU stages of this run ran against the fake CUDA driver and fake NVML "
                "(secureml run --simulate-gpu), not a real GPU.\n"
            )
            simulation = stack.enter_context(simulated_gpus(layout.root / "fakegpu"))
            process_env.update(simulation.process_env)
        apply_local_overlay(steps, layout, spiffe_endpoint=api.endpoint if api else None)
        layout.compiled.write_text(compiled.to_yaml())
        stack.enter_context(_environment(process_env))
        stack.enter_context(per_task_env(_task_hook(layout, simulation)))
        local.init(
            runner=local.SubprocessRunner(use_venv=False),
            pipeline_root=str(layout.pipeline_root.resolve()),
            raise_on_error=True,
        )
        pipeline = components.load_component_from_text(layout.compiled.read_text())
        failure = ""
        with warnings.catch_warnings():
            # Images are not pulled locally: the steps run in this Python environment.
            warnings.filterwarnings("ignore", message=".*non-Python base image.*")
            # GPU placement is a cluster matter; locally the launcher checks what it is given.
            warnings.filterwarnings(
                "ignore", message=".*have no effect in the current local runner.*"
            )
            try:
                with captured_output(layout.log, verbose=verbose):
                    pipeline(**bound)
            except RuntimeError as err:
                failure = ANSI.sub("", str(err))
    return RunResult(
        pipeline=compiled.name,
        layout=layout,
        succeeded=not failure,
        failure=failure,
        records=load_audit_records(layout.audit_dir),
        simulated_gpu=simulate_gpu,
        steps=steps,
    )


def run_pipeline(
    pipeline: Any,
    profile: TenantProfile,
    layout: RunLayout,
    *,
    arguments: Mapping[str, Any] | None = None,
    dev_identity: bool = False,
    simulate_gpu: bool = False,
    verbose: bool = False,
) -> RunResult:
    """Compile `pipeline` (a `@dsl.pipeline`) for `profile` as `secureml compile` does, then run it.

    Image signatures are not checked here: a local run pulls no image, the steps run in this Python
    environment. `secureml compile` checks them before a pipeline goes to a cluster.
    """
    from secureml.compile.compiler import compile_pipeline

    compiled = compile_pipeline(pipeline, profile)
    return run_compiled(
        LocalPipeline.from_text(compiled.yaml_text, source=f"pipeline {compiled.name}"),
        profile,
        layout,
        arguments=arguments,
        dev_identity=dev_identity,
        simulate_gpu=simulate_gpu,
        verbose=verbose,
    )


def run_pipeline_file(
    file: Path,
    profile_path: Path,
    layout: RunLayout,
    *,
    pipeline_name: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    dev_identity: bool = False,
    simulate_gpu: bool = False,
    verbose: bool = False,
    allow_unverified_images: bool = False,
) -> RunResult:
    """`secureml run FILE --profile PROFILE --local`: load, compile and run one pipeline.

    A profile that requires signed images is refused unless `allow_unverified_images`: `compile`
    would refuse an image it cannot verify, and a local run verifies none (it pulls no image)."""
    from secureml.compile.pipeline_loader import load_pipeline
    from secureml.profile.model import load_profile

    profile = load_profile(profile_path)
    if profile.spec.images.signatures.required and not allow_unverified_images:
        raise InputError(
            f"profile {profile.metadata.name} requires signed images, and a local run verifies "
            "no signature",
            why="a local run pulls no image: its steps run in this Python environment, so the "
            "images the pipeline names are neither fetched nor verified, where `secureml compile` "
            "and the cluster's image policy refuse an image they cannot verify",
            fix="pass --allow-unverified-images to run anyway (the summary says signatures were "
            "skipped), and check the images with `secureml compile --fetch-bundles`; or run "
            "against a development profile that does not require signatures",
            where=str(profile_path),
        )
    pipeline = load_pipeline(file, pipeline_name)
    return run_pipeline(
        pipeline,
        profile,
        layout,
        arguments=arguments,
        dev_identity=dev_identity,
        simulate_gpu=simulate_gpu,
        verbose=verbose,
    )
