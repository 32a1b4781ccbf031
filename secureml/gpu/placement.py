"""How a GPU request becomes Kubernetes scheduling terms: resource names, selectors, a DRA claim."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypedDict

from secureml.core import contract
from secureml.gpu.request import MIG, GPURequest, GPURequestError, TimeSlice, WholeGPU
from secureml.nvidia.catalogue import (
    CC_READY,
    LABEL_CC_READY,
    LABEL_GPU_PRODUCT,
    LABEL_SHARING_STRATEGY,
    MIG_RESOURCE_PREFIX,
    RESOURCE_GPU,
    SHARING_TIME_SLICING,
    mig_product_names,
    mig_resource_name,
)

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

# --- mapping -----------------------------------------------------------------------------------


class NodeSelectorRequirement(TypedDict):
    """One matchExpression of a required node affinity (Kubernetes NodeSelectorRequirement)."""

    key: str
    operator: str
    values: list[str]


@dataclass(frozen=True, slots=True)
class Placement:
    """What the compiler writes into a task for one (already checked) GPU request."""

    isolation: str
    accelerator_type: str | None = None  # extended resource name; None on the dra backend
    accelerator_count: int = 0
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: list[NodeSelectorRequirement] = field(default_factory=list)  # required terms
    tolerations: list[dict[str, object]] = field(default_factory=list)
    pod_labels: dict[str, str] = field(default_factory=dict)


def _product_terms(values: list[str]) -> tuple[dict[str, str], list[NodeSelectorRequirement]]:
    """One product: a node selector; several: a required node affinity `In` (a selector holds one)."""
    if len(values) == 1:
        return {LABEL_GPU_PRODUCT: values[0]}, []
    return {}, [{"key": LABEL_GPU_PRODUCT, "operator": "In", "values": values}]


def claim_template_name(request: GPURequest) -> str:
    """Name of the ResourceClaimTemplate the tenant bundle renders for `request` (dra backend).

    `secureml-mig-1g-10gb`, `secureml-mig-1g-10gb-x2`, `secureml-timeslice`, `secureml-gpu-2`,
    `secureml-gpu-1-nvidia-h100-80gb-hbm3`: DNS-1123 names, one per distinct request shape.
    Time-slice limits are enforced by the shim, not the claim, so every share uses one template.
    """
    if isinstance(request, MIG):
        name = "secureml-mig-" + re.sub(r"[^a-z0-9]+", "-", request.profile.lower()).strip("-")
        return name if request.count == 1 else f"{name}-x{request.count}"
    if isinstance(request, TimeSlice):
        return "secureml-timeslice"
    name = f"secureml-gpu-{request.count}"
    if request.product:
        name += "-" + re.sub(r"[^a-z0-9]+", "-", request.product.lower()).strip("-")
    return name[:253].rstrip("-")


def gpu_pool_labels(profile: TenantProfile) -> dict[str, list[str]]:
    """Node label -> values of the GPU pools the profile names (time-sliced nodes, dedicated pool)."""
    settings = profile.spec.gpu
    pools: dict[str, set[str]] = {}
    selectors: list[dict[str, str]] = []
    if settings.time_slice is not None:
        selectors.append(
            {LABEL_SHARING_STRATEGY: SHARING_TIME_SLICING, **settings.time_slice.node_selector}
        )
    if settings.whole_gpu is not None:
        selectors.append(dict(settings.whole_gpu.node_selector))
    for selector in selectors:
        for key, value in selector.items():
            pools.setdefault(key, set()).add(value)
    return {key: sorted(values) for key, values in sorted(pools.items())}


def off_gpu_pools(profile: TenantProfile) -> list[NodeSelectorRequirement]:
    """A GPU-free step's required node affinity: `NotIn` every GPU pool label the profile names,
    so that no image's own `NVIDIA_VISIBLE_DEVICES` meets a GPU nobody allocated to the step."""
    return [
        {"key": key, "operator": "NotIn", "values": values}
        for key, values in gpu_pool_labels(profile).items()
    ]


def confidential_selector(profile: TenantProfile) -> dict[str, str]:
    """The node label every GPU step of a profile that requires confidential computing selects:
    the CC manager's readiness label (`gpu_catalogue.LABEL_CC_READY`); `{}` otherwise."""
    if profile.spec.gpu.confidential_computing != "required":
        return {}
    return {LABEL_CC_READY: CC_READY}


def placement(request: GPURequest | None, profile: TenantProfile) -> Placement:
    """Scheduling terms for `request` on `profile`'s cluster. The request must already have passed
    `compile_rules` (allowed kind, profile and limits); `None` is a step without a GPU. A GPU step
    of a profile that requires confidential computing also selects CC-ready nodes."""
    placed = _placement(request, profile)
    cc = confidential_selector(profile) if request is not None else {}
    if not cc:
        return placed
    return replace(placed, node_selector={**placed.node_selector, **cc})


def _placement(request: GPURequest | None, profile: TenantProfile) -> Placement:
    if request is None:
        return Placement(isolation=contract.ISOLATION_NONE, node_affinity=off_gpu_pools(profile))
    gpu = profile.spec.gpu
    isolation = request.isolation(profile)
    if gpu.backend == "dra":
        return Placement(
            isolation=isolation, pod_labels={contract.LABEL_GPU_CLAIM: claim_template_name(request)}
        )
    if isinstance(request, MIG):
        if gpu.mig_strategy == "mixed":
            return Placement(isolation, mig_resource_name(request.profile), request.count)
        selector, affinity = _product_terms(mig_product_names(request.profile, list(gpu.models)))
        return Placement(isolation, RESOURCE_GPU, request.count, selector, affinity)
    if isinstance(request, TimeSlice):
        time_slice = gpu.time_slice
        assert time_slice is not None, (
            "compile_rules refuses time slices the profile does not offer"
        )
        selector = {
            LABEL_SHARING_STRATEGY: SHARING_TIME_SLICING,
            **dict(time_slice.node_selector or {}),
        }
        return Placement(isolation, time_slice.resource_name, 1, selector)
    whole = gpu.whole_gpu
    assert whole is not None, "compile_rules refuses whole GPUs the profile does not offer"
    selector = dict(whole.node_selector or {})
    if request.product:
        selector[LABEL_GPU_PRODUCT] = request.product
    return Placement(
        isolation,
        RESOURCE_GPU,
        request.count,
        selector,
        [],
        [toleration.model_dump(exclude_none=True) for toleration in whole.tolerations],
    )


def allowed_accelerators(profile: TenantProfile) -> set[str]:
    """Extended resource names a task of `profile` may carry (empty on the dra backend)."""
    gpu = profile.spec.gpu
    if gpu.backend == "dra":
        return set()
    names: set[str] = set()
    if gpu.mig is not None:
        if gpu.mig_strategy == "mixed":
            names.update(mig_resource_name(name) for name in gpu.mig.allowed_profiles)
        else:
            names.add(RESOURCE_GPU)
    if gpu.time_slice is not None:
        names.add(gpu.time_slice.resource_name)
    if gpu.whole_gpu is not None:
        names.add(RESOURCE_GPU)
    return names


# --- kfp's own request -----------------------------------------------------------------------------


def request_for_accelerator(name: str, limit: str | None, profile: TenantProfile) -> GPURequest:
    """The request a kfp-native `set_accelerator_type(name).set_accelerator_limit(limit)` names,
    so that it is checked and placed like `gpu=`: `nvidia.com/gpu` is `WholeGPU(limit)`,
    `nvidia.com/mig-<profile>` is `MIG(profile, limit)`, and the tenant's time-slice resource is one
    `TimeSlice` at the profile's limits (`maxMemory`, `maxCompute`). `GPURequestError` for any other
    name, a count that is not a whole number from 1, or more than one time-sliced share. Names
    chosen at run time are the caller's to refuse: they cannot be mapped before the run.
    """
    where = f"set_accelerator_type({name!r})"
    count = int(limit) if limit is not None and limit.isdigit() else 0
    if count < 1:
        raise GPURequestError(
            f"set_accelerator_limit({limit!r}) asks for no GPU",
            fix="set a limit of 1 or more, or remove set_accelerator_type",
            where=where,
        )
    time_slice = profile.spec.gpu.time_slice
    if name == RESOURCE_GPU:
        return WholeGPU(count)
    if name.startswith(MIG_RESOURCE_PREFIX):
        return MIG(name.removeprefix(MIG_RESOURCE_PREFIX), count)
    if time_slice is not None and name == time_slice.resource_name:
        if count != 1:
            raise GPURequestError(
                f"{count} time-sliced shares asked for; a step gets one",
                why="the shim's limits hold per container; a second share would double them",
                fix="set_accelerator_limit(1), or ask for whole GPUs",
                where=where,
            )
        return TimeSlice(time_slice.max_memory, time_slice.max_compute)
    raise GPURequestError(
        f"accelerator {name!r} is none of the GPUs this tenant offers",
        why=f"kfp-native requests are read as {RESOURCE_GPU} (whole GPUs), "
        f"{MIG_RESOURCE_PREFIX}<profile> (MIG) or the tenant's time-slice resource",
        fix="ask with @secure_component(gpu=MIG(...) | TimeSlice(...) | WholeGPU(...))",
        where=where,
    )
