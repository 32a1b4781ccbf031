"""Which tenant profiles apply to this node, and what they expect of its GPUs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from secureml.nvidia.catalogue import (
    LABEL_GPU_PRODUCT,
    LABEL_SHARING_STRATEGY,
    MIG_CATALOGUE,
    SHARING_TIME_SLICING,
    mig_product_names,
)
from secureml.profile.model import TenantProfile


@dataclass(frozen=True)
class Expectations:
    """What the profiles that apply to this node expect, with who expects it."""

    tenants: tuple[str, ...] = ()
    mig_profiles: dict[str, list[str]] = field(default_factory=dict)  # MIG profile -> tenants
    whole_gpu: list[str] = field(default_factory=list)  # tenants with whole GPUs on this node
    time_slice: dict[str, list[str]] = field(default_factory=dict)  # resource name -> tenants
    confidential: list[str] = field(default_factory=list)  # tenants that require CC
    mig_strategy: dict[str, list[str]] = field(default_factory=dict)  # strategy -> tenants


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _products(profile: TenantProfile) -> set[str]:
    return {
        product
        for name in profile.spec.gpu.models
        if (model := MIG_CATALOGUE.get(name)) is not None
        for product in model.products
    }


def pools_on_node(profile: TenantProfile, labels: Mapping[str, str] | None) -> list[str]:
    """The kinds of the profile's GPU pools (`mig`, `timeslice`, `whole`) this node is in."""
    gpu = profile.spec.gpu
    kinds: list[str] = []
    product = (labels or {}).get(LABEL_GPU_PRODUCT)
    mig_profiles = gpu.mig.allowed_profiles if gpu.mig is not None else []
    if mig_profiles:
        if gpu.mig_strategy == "single":
            names = {n for p in mig_profiles for n in mig_product_names(p, list(gpu.models))}
        else:
            names = _products(profile)
        if labels is None or product in names:
            kinds.append("mig")
    if gpu.time_slice is not None:
        selector = {LABEL_SHARING_STRATEGY: SHARING_TIME_SLICING, **gpu.time_slice.node_selector}
        if labels is None or _selects(selector, labels):
            kinds.append("timeslice")
    if gpu.whole_gpu is not None:
        if labels is None or _selects(gpu.whole_gpu.node_selector, labels):
            kinds.append("whole")
    return kinds


def expectations(
    profiles: Sequence[TenantProfile], labels: Mapping[str, str] | None
) -> Expectations:
    """What the profiles whose pools hold this node expect of it."""
    result = Expectations()
    tenants: list[str] = []
    for profile in profiles:
        kinds = pools_on_node(profile, labels)
        if not kinds:
            continue
        tenant = profile.metadata.name
        gpu = profile.spec.gpu
        tenants.append(tenant)
        if "mig" in kinds and gpu.mig is not None:
            for name in gpu.mig.allowed_profiles:
                result.mig_profiles.setdefault(name, []).append(tenant)
            result.mig_strategy.setdefault(gpu.mig_strategy, []).append(tenant)
        if "whole" in kinds:
            result.whole_gpu.append(tenant)
        if "timeslice" in kinds and gpu.time_slice is not None:
            result.time_slice.setdefault(gpu.time_slice.resource_name, []).append(tenant)
        if gpu.confidential_computing == "required":
            result.confidential.append(tenant)
    return Expectations(
        tuple(tenants),
        result.mig_profiles,
        result.whole_gpu,
        result.time_slice,
        result.confidential,
        result.mig_strategy,
    )
