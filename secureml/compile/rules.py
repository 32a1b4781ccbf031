"""The compile-time rules: every task of a pipeline against the tenant profile (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from secureml.compile.decorator import SecureSettings
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef, registry_allowed
from secureml.core.quantity import format_bytes
from secureml.core.violation import Violation
from secureml.gpu import placement as gpu
from secureml.gpu.request import MIG, GPURequest, GPURequestError, TimeSlice
from secureml.nvidia import catalogue as gpu_catalogue

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

# id -> what the rule guards. docs/rules.md documents each one; tests/compiler checks both agree.
RULES: dict[str, str] = {
    "isolation.below-tier": "the step's GPU isolation is weaker than the tenant tier allows",
    "gpu.mig-forbidden": "the step asks for a MIG slice but the profile allows none",
    "gpu.mig-profile-not-allowed": "the MIG profile is not in spec.gpu.mig.allowedProfiles",
    "gpu.mig-profile-unknown": "none of the profile's GPU models offers the MIG profile",
    "gpu.mig-count": "more MIG instances than fit on one GPU of the tenant's models",
    "gpu.timeslice-forbidden": "the step asks for a time-sliced share but the profile allows none",
    "gpu.timeslice-memory": "the time-slice memory exceeds spec.gpu.timeSlice.maxMemory",
    "gpu.timeslice-compute": "the time-slice compute share exceeds spec.gpu.timeSlice.maxCompute",
    "gpu.whole-forbidden": "the step asks for whole GPUs but the profile allows none",
    "gpu.whole-count": "more whole GPUs than spec.gpu.wholeGpu.maxPerStep",
    "gpu.whole-product": "the GPU product is not one of the profile's GPU models",
    "gpu.quota": "one step asks for more of a GPU resource than the namespace quota holds",
    "accelerator.not-allowed": "an accelerator set on the task names no GPU this tenant offers, "
    "or is chosen at run time",
    "accelerator.without-request": "an accelerator set on the task beside its @secure_component "
    "GPU request: two requests for one step",
    "accelerator.without-type": "an accelerator limit set on the task without its type: kfp "
    "compiles no GPU for it",
    "image.invalid": "the image reference cannot be parsed",
    "image.dynamic": "the image is chosen at run time, so it cannot be checked",
    "image.registry": "the image is not under one of spec.images.allowedRegistries",
    "image.digest": "the image is not pinned by digest but the profile requires it",
    "runtime.install": "the step installs packages when it starts",
    "runtime.debug-pause": "the task keeps its pod alive for interactive debugging",
    "env.forbidden": "the task sets a variable that switches a control off",
    "env.reserved": "the task sets a SECUREML_* variable, which only the compiler may set",
    "metadata.reserved": "the task sets a secureml.dev/ pod label or annotation itself",
    "scheduling.from-parameter": "a toleration, node selector or node affinity comes from a "
    "pipeline parameter or task output, so neither the compiler nor admission preview can check it",
    "launcher.no-command": "the component has no command the launcher can wrap",
    "pipeline.nested-unresolved": "a nested pipeline could not be found to secure its steps",
    "model.no-trusted-signers": "the step verifies its inputs' model signatures (verify_inputs=) "
    "but the profile trusts no model signer (spec.models)",
    "model.oci-sidecar": "an importer imports an oci:// model, which KFP's driver would run as a "
    "modelcar sidecar beside the launcher",
}


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the rules look at in one container task, read from the traced PipelineTask."""

    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    accelerator_type: str | None
    settings: SecureSettings | None
    accelerator_limit: str | None = None  # set_accelerator_limit (kfp writes "1" with a type)
    k8s_env_names: tuple[str, ...] = ()  # env from secrets/config maps/field paths (kfp.kubernetes)
    k8s_labels: dict[str, str] = field(default_factory=dict)
    k8s_annotations: dict[str, str] = field(default_factory=dict)
    # kfp.kubernetes scheduling calls fed from a parameter at run time (add_toleration_json, ...)
    k8s_scheduling_from_parameter: tuple[str, ...] = ()


AddViolation = Callable[[str, str, str], None]
"""`add(rule, what, fix)`: record one violation of the task being checked."""


def check_task(view: TaskView, profile: TenantProfile) -> list[Violation]:
    """Every violation of the compile rules by one container task."""
    found: list[Violation] = []

    def add(rule: str, what: str, fix: str) -> None:
        found.append(Violation(rule, what, fix, task=view.name))

    _check_image(view, profile, add)
    _check_runtime(view, profile, add)
    _check_env(view, add)
    _check_metadata(view, add)
    _check_scheduling(view, add)
    _check_accelerator(view, profile, add)
    request = task_gpu_request(view, profile)
    if request is not None:
        _check_gpu(request, profile, add)
    level = request.isolation(profile) if request is not None else contract.ISOLATION_NONE
    if level != contract.ISOLATION_NONE and not profile.allows_isolation(level):
        add(
            "isolation.below-tier",
            f"isolation {level} is weaker than {profile.min_isolation()}, the minimum for tier "
            f"{profile.spec.tier}",
            f"ask for a GPU with isolation {profile.min_isolation()} or stronger "
            f"({_stronger_requests(profile)})",
        )
    if not view.command:
        add(
            "launcher.no-command",
            "the component has no command; it relies on the image's ENTRYPOINT",
            "give the container component an explicit command=[...] so the secureml launcher can "
            "wrap it, or compile with --resolve-entrypoints to read the digest-pinned image's "
            "ENTRYPOINT from its registry",
        )
    return found


def _stronger_requests(profile: TenantProfile) -> str:
    order = contract.ISOLATION_LEVELS
    allowed = order[order.index(profile.min_isolation()) :]
    spelled = {
        "timeslice": "TimeSlice",
        "timeslice-shim": "TimeSlice with the shim",
        "mig": "MIG(...)",
        "dedicated": "WholeGPU(...)",
    }
    return ", ".join(spelled[level] for level in allowed)


def _check_image(view: TaskView, profile: TenantProfile, add: AddViolation) -> None:
    images = profile.spec.images
    if "{{channel:" in view.image:
        add(
            "image.dynamic",
            f"the image {view.image!r} comes from a pipeline parameter or task output",
            "name a fixed, digest-pinned image in the component or with set_container_image('...')",
        )
        return
    try:
        ref = ImageRef.parse(view.image)
    except SecuremlError as err:
        add(
            "image.invalid",
            err.what + (f" ({err.why})" if err.why else ""),
            err.fix or "fix the image reference",
        )
        return
    if not registry_allowed(ref, list(images.allowed_registries)):
        add(
            "image.registry",
            f"image {view.image} is not under an allowed registry "
            f"({', '.join(images.allowed_registries)})",
            "push the image to an allowed registry, or ask the platform team to allow this one",
        )
    if images.require_digest and not ref.pinned:
        add(
            "image.digest",
            f"image {view.image} is not pinned by digest",
            "append @sha256:<digest> (e.g. from `crane digest IMAGE`) to the image reference",
        )


def _check_runtime(view: TaskView, profile: TenantProfile, add: AddViolation) -> None:
    if not profile.spec.runtime.allow_runtime_installs:
        text = " ".join(view.command + view.args)
        if "pip install" in text or "pip3 install" in text:
            add(
                "runtime.install",
                "the step runs pip install when it starts (packages_to_install, "
                "install_kfp_package or use_venv)",
                "build the packages into the image and pass install_kfp_package=False without "
                "packages_to_install (the default of @secure_component)",
            )
    pauses = sorted(name for name in view.env if name.startswith("ARGO_DEBUG_PAUSE"))
    if pauses:
        add(
            "runtime.debug-pause",
            f"set_debug_pause sets {', '.join(pauses)}",
            "remove set_debug_pause; debug with `secureml run --local` instead",
        )


def _check_env(view: TaskView, add: AddViolation) -> None:
    for name in sorted({*view.env, *view.k8s_env_names}):
        if name in contract.FORBIDDEN_ENV:
            add(
                "env.forbidden",
                f"the task sets {name}, which can switch a control off",
                f"remove {name} from the task's environment",
            )
        elif name.startswith(contract.ENV_PREFIX):
            add(
                "env.reserved",
                f"the task sets {name}; SECUREML_* variables are the compiler's",
                f"remove {name}; the compiler sets what the launcher needs from the profile",
            )


def _check_metadata(view: TaskView, add: AddViolation) -> None:
    for kind, keys in (("label", view.k8s_labels), ("annotation", view.k8s_annotations)):
        for key in sorted(keys):
            if key.startswith(contract.LABEL_PREFIX):
                add(
                    "metadata.reserved",
                    f"the task sets pod {kind} {key} itself",
                    f"remove the add_pod_{kind}({key!r}, ...) call; secureml sets its own labels",
                )


def _check_scheduling(view: TaskView, add: AddViolation) -> None:
    for call in view.k8s_scheduling_from_parameter:
        add(
            "scheduling.from-parameter",
            f"{call} takes its value from a pipeline parameter or task output at run time",
            "remove it: the compiler places the step on the tenant's pool from its GPU request "
            "(or pass a literal dict, which the admission rules then check)",
        )


def task_gpu_request(view: TaskView, profile: TenantProfile) -> GPURequest | None:
    """The step's GPU request: `@secure_component(gpu=...)`, else the kfp-native accelerator
    (`set_accelerator_type/limit`, read by `gpu.request_for_accelerator`). None without either, or
    when the accelerator cannot be read (`_check_accelerator` reports why)."""
    if view.settings is not None and view.settings.gpu is not None:
        return view.settings.gpu
    if not view.accelerator_type or _chosen_at_run_time(view):
        return None
    try:
        return gpu.request_for_accelerator(view.accelerator_type, view.accelerator_limit, profile)
    except GPURequestError:
        return None


def _chosen_at_run_time(view: TaskView) -> bool:
    return any(
        "{{channel:" in (value or "") for value in (view.accelerator_type, view.accelerator_limit)
    )


def _check_accelerator(view: TaskView, profile: TenantProfile, add: AddViolation) -> None:
    name = view.accelerator_type
    if not name:
        if view.accelerator_limit and (view.settings is None or view.settings.gpu is None):
            add(
                "accelerator.without-type",
                f"set_accelerator_limit({view.accelerator_limit}) (or set_gpu_limit) without "
                "set_accelerator_type: kfp compiles no GPU for it, so the step would run without one",
                "ask for the GPU with @secure_component(gpu=WholeGPU(n)) (or MIG/TimeSlice), or "
                "name it: .set_accelerator_type('nvidia.com/gpu')",
            )
        return
    fix = "ask for the GPU with @secure_component(gpu=...) or a fixed set_accelerator_type/limit"
    if view.settings is not None and view.settings.gpu is not None:
        add(
            "accelerator.without-request",
            f"set_accelerator_type({name!r}) beside gpu={view.settings.gpu.describe()}: two GPU "
            "requests for one step",
            "remove set_accelerator_type/limit: gpu= already gives the step its GPU",
        )
    elif _chosen_at_run_time(view):
        add(
            "accelerator.not-allowed",
            "an accelerator chosen at run time (a pipeline parameter or task output) cannot be "
            "checked against the profile",
            fix,
        )
    else:
        try:
            gpu.request_for_accelerator(name, view.accelerator_limit, profile)
        except GPURequestError as err:
            allowed = ", ".join(sorted(gpu.allowed_accelerators(profile))) or "none"
            add(
                "accelerator.not-allowed",
                f"{err.where}: {err.what} (this tenant's GPU resources: {allowed})",
                err.fix or fix,
            )


def _check_gpu(request: GPURequest, profile: TenantProfile, add: AddViolation) -> None:
    settings = profile.spec.gpu
    if isinstance(request, MIG):
        _check_mig(request, profile, add)
    elif isinstance(request, TimeSlice):
        time_slice = settings.time_slice
        if time_slice is None:
            add(
                "gpu.timeslice-forbidden",
                "the step asks for a time-sliced GPU share; the profile allows none",
                f"ask for {_stronger_requests(profile)} instead",
            )
            return
        if request.memory_bytes > time_slice.max_memory:
            add(
                "gpu.timeslice-memory",
                f"memory {format_bytes(request.memory_bytes)} exceeds the limit "
                f"{format_bytes(time_slice.max_memory)}",
                f"ask for at most memory={format_bytes(time_slice.max_memory)!r}",
            )
        if request.compute > time_slice.max_compute:
            add(
                "gpu.timeslice-compute",
                f"compute {request.compute}% exceeds the limit {time_slice.max_compute}%",
                f"ask for at most compute={time_slice.max_compute}",
            )
    else:
        whole = settings.whole_gpu
        if whole is None:
            add(
                "gpu.whole-forbidden",
                "the step asks for whole GPUs; the profile allows none",
                "ask for a MIG slice or a time-sliced share the profile allows",
            )
            return
        if request.count > whole.max_per_step:
            add(
                "gpu.whole-count",
                f"{request.count} whole GPUs exceed the limit of {whole.max_per_step} per step",
                f"ask for WholeGPU({whole.max_per_step}) or fewer",
            )
        known = [
            gpu_catalogue.MIG_CATALOGUE[name]
            for name in settings.models
            if name in gpu_catalogue.MIG_CATALOGUE
        ]
        if request.product and settings.models and len(known) == len(settings.models):
            products = [product for model in known for product in model.products]
            if request.product not in products:
                add(
                    "gpu.whole-product",
                    f"product {request.product!r} is not one of the tenant's GPU "
                    f"models ({', '.join(settings.models)})",
                    f"use one of {', '.join(products)} or leave product out",
                )
    _check_quota(request, profile, add)


def _check_mig(request: MIG, profile: TenantProfile, add: AddViolation) -> None:
    settings = profile.spec.gpu
    if settings.mig is None or not settings.mig.allowed_profiles:
        add(
            "gpu.mig-forbidden",
            "the step asks for a MIG slice; the profile allows none",
            "ask for a GPU kind the profile allows (spec.gpu)",
        )
        return
    if request.profile not in settings.mig.allowed_profiles:
        add(
            "gpu.mig-profile-not-allowed",
            f"MIG profile {request.profile} is not allowed",
            f"use one of {', '.join(settings.mig.allowed_profiles)}",
        )
    model_names = list(settings.models) or list(gpu_catalogue.MIG_CATALOGUE)
    offering = gpu_catalogue.models_offering(request.profile, model_names)
    if not offering:
        add(
            "gpu.mig-profile-unknown",
            f"no GPU model of the tenant ({', '.join(model_names)}) has MIG "
            f"profile {request.profile}",
            "use a profile of the tenant's models, e.g. "
            + ", ".join(
                sorted(
                    {
                        p
                        for n in model_names
                        if n in gpu_catalogue.MIG_CATALOGUE
                        for p in gpu_catalogue.MIG_CATALOGUE[n].profiles
                    }
                )
            )[:200],
        )
        return
    most = max(model.profiles[request.profile].max_instances for model in offering)
    if request.count > most:
        add(
            "gpu.mig-count",
            f"{request.count} instances of {request.profile} do not fit on one GPU "
            f"(at most {most})",
            f"ask for count={most} or fewer, or a larger profile",
        )


def _check_quota(request: GPURequest, profile: TenantProfile, add: AddViolation) -> None:
    settings = profile.spec.gpu
    if settings.backend == "dra":
        return
    placed = gpu.placement(request, profile)
    if placed.accelerator_type and placed.accelerator_type in settings.quota:
        quota = settings.quota[placed.accelerator_type]
        if placed.accelerator_count > quota:
            add(
                "gpu.quota",
                f"the step asks for {placed.accelerator_count} {placed.accelerator_type}; "
                f"the namespace quota is {quota}",
                f"ask for at most {quota}",
            )
