"""Rules on how a pod reaches devices: the resource names it asks for, how many, and the NVIDIA
container runtime's environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass

from secureml.core import contract
from secureml.nvidia import catalogue as gpu_catalogue
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, container_rule_message, every_container
from secureml.rules.cel.text import label_is, quote, string_list
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD, STEP_POD

NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
CUDA_VERSION = "CUDA_VERSION"
NVIDIA_ENV_PREFIX = "NVIDIA_"


def _label_is(value: str) -> str:
    return label_is(contract.LABEL_ISOLATION, value)


@dataclass(frozen=True, slots=True)
class GrantedResource:
    """A GPU resource name the profile grants and the most one pod may hold of it."""

    name: str
    limit: int
    # MIG strategy single: nvidia.com/gpu counts MIG instances on a pod labelled `mig`.
    mig_limit: int | None = None


def _capped(profile: TenantProfile, name: str, limit: int) -> int:
    quota = profile.spec.gpu.quota.get(name)
    return limit if quota is None else min(limit, quota)


def mig_instances(profile: TenantProfile, mig_profile: str) -> int:
    """Most instances of `mig_profile` one step may ask for: what fits on one GPU of the tenant's
    models (the compile rule `gpu.mig-count`)."""
    models = list(profile.spec.gpu.models) or list(gpu_catalogue.MIG_CATALOGUE)
    offering = gpu_catalogue.models_offering(mig_profile, models)
    return max((m.profiles[mig_profile].max_instances for m in offering), default=0)


def granted_resources(profile: TenantProfile) -> list[GrantedResource]:
    """The GPU resource names of `profile`, each with its per-pod limit (sorted by name)."""
    settings = profile.spec.gpu
    if settings.backend == "dra":
        return []
    granted: dict[str, GrantedResource] = {}
    if settings.time_slice is not None:
        name = settings.time_slice.resource_name
        granted[name] = GrantedResource(name, _capped(profile, name, 1))
    whole = settings.whole_gpu.max_per_step if settings.whole_gpu is not None else 0
    mig = settings.mig
    if mig is not None and settings.mig_strategy == "mixed":
        for profile_name in mig.allowed_profiles:
            name = gpu_catalogue.mig_resource_name(profile_name)
            granted[name] = GrantedResource(
                name, _capped(profile, name, mig_instances(profile, profile_name))
            )
    single = mig is not None and settings.mig_strategy == "single" and bool(mig.allowed_profiles)
    if settings.whole_gpu is not None or single:
        name = gpu_catalogue.RESOURCE_GPU
        mig_limit = None
        if single and mig is not None:
            most = max(mig_instances(profile, p) for p in mig.allowed_profiles)
            mig_limit = _capped(profile, name, most)
        granted[name] = GrantedResource(name, _capped(profile, name, whole), mig_limit)
    return [granted[name] for name in sorted(granted)]


def _holds(name: str, var: str = "c") -> str:
    """CEL: container `var` limits or requests the resource `name`."""
    key = quote(name)
    return (
        f"(has({var}.resources) && ("
        f"(has(dyn({var}.resources).limits) && {key} in dyn({var}.resources).limits) || "
        f"(has(dyn({var}.resources).requests) && {key} in dyn({var}.resources).requests)))"
    )


def _count_within(name: str, counts: str, var: str = "c") -> str:
    """CEL: every amount of `name` container `var` states (limits and requests) is in `counts`."""
    key = quote(name)
    return (
        f"(!has({var}.resources) || ("
        f"(!has(dyn({var}.resources).limits) || !({key} in dyn({var}.resources).limits) || "
        f"string(dyn({var}.resources).limits[{key}]) in {counts}) && "
        f"(!has(dyn({var}.resources).requests) || !({key} in dyn({var}.resources).requests) || "
        f"string(dyn({var}.resources).requests[{key}]) in {counts})))"
    )


def _holders(name: str) -> str:
    """CEL: how many containers of the pod (every list) hold `name`."""
    return (
        "("
        + " + ".join(
            f"(has({SPEC}.{lst}) ? size({SPEC}.{lst}.filter(c, {_holds(name)})) : 0)"
            for lst in CONTAINER_LISTS
        )
        + ")"
    )


def _counts(limit: int) -> str:
    return string_list(str(n) for n in range(1, limit + 1))


def resource_name_rule(profile: TenantProfile) -> Rule:
    granted = [r.name for r in granted_resources(profile)]
    allowed = string_list([*NATIVE_RESOURCES, *granted])
    key_ok = f"(k in {allowed} || k.startsWith({quote(HUGEPAGES_PREFIX)}))"
    container_ok = (
        "(!has(c.resources) || ("
        f"(!has(dyn(c.resources).limits) || dyn(c.resources).limits.all(k, {key_ok})) && "
        f"(!has(dyn(c.resources).requests) || dyn(c.resources).requests.all(k, {key_ok}))))"
    )
    pod_ok = (
        f"(!has({SPEC}.resources) || ("
        f"(!has(dyn({SPEC}.resources).limits) || dyn({SPEC}.resources).limits.all(k, {key_ok})) && "
        f"(!has(dyn({SPEC}.resources).requests) || dyn({SPEC}.resources).requests.all(k, {key_ok}))))"
    )
    names = ", ".join(granted) or "none"
    tail = (
        f"must ask for no resource but cpu, memory, ephemeral-storage, hugepages-* and the GPU "
        f"resources this tenant is granted ({names})"
    )
    return tenant_rule(
        profile,
        "secureml.resourceName",
        tail,
        f"{pod_ok} && {every_container(container_ok)}",
        container_rule_message(
            container_ok, tail, f"pod-level spec.resources {tail.removeprefix('must ')}"
        ),
        STEP_POD,
    )


def gpu_count_rule(profile: TenantProfile) -> Rule | None:
    granted = granted_resources(profile)
    if not granted:
        return None
    checks: list[str] = []
    described: list[str] = []
    for resource in granted:
        counts = _counts(resource.limit)
        within = every_container(_count_within(resource.name, counts))
        text = f"{resource.name} {_bound(resource.limit)}"
        if resource.mig_limit is not None:
            mig_within = every_container(_count_within(resource.name, _counts(resource.mig_limit)))
            within = f"({_label_is('mig')} ? {mig_within} : {within})"
            text += f" ({_bound(resource.mig_limit)} on a pod labelled mig)"
        checks.append(f"({_holders(resource.name)} <= 1 && {within})")
        described.append(text)
    message = (
        "each GPU resource is held by one container of the pod at most, within the per-step "
        f"limit: {'; '.join(described)}"
    )
    return tenant_rule(
        profile,
        "secureml.gpuCount",
        message,
        " && ".join(checks),
        quote("pod asks for more GPU than one step may hold: " + "; ".join(described)),
        STEP_POD,
    )


def _bound(limit: int) -> str:
    return "refused (no quota)" if limit < 1 else f"1..{limit}"


def nvidia_env_rule(profile: TenantProfile) -> Rule:
    prefix = quote(NVIDIA_ENV_PREFIX)
    cuda = quote(CUDA_VERSION)
    bad_name = f"(e.name == {cuda} || e.name.startsWith({prefix}))"
    env_ok = f"(!has(c.env) || c.env.all(e, !{bad_name}))"
    # An imported name is prefix + key; keys are any name, so a prefix that begins NVIDIA_, or
    # that NVIDIA_ or CUDA_VERSION begins with, can form one. (No prefix: secureml.envFrom.)
    from_ok = (
        "(!has(c.envFrom) || c.envFrom.all(s, !has(s.prefix) || ("
        f"!s.prefix.startsWith({prefix}) && !{prefix}.startsWith(s.prefix) && "
        f"!{cuda}.startsWith(s.prefix))))"
    )
    predicate = f"({env_ok} && {from_ok})"
    tail = (
        "must not set CUDA_VERSION or any NVIDIA_* variable, in env or through an envFrom prefix "
        "(the NVIDIA container runtime reads them to hand out GPUs)"
    )
    return tenant_rule(
        profile,
        "secureml.nvidiaEnv",
        tail,
        every_container(predicate),
        container_rule_message(predicate, tail),
        EVERY_POD,
    )


def resource_rules(profile: TenantProfile) -> list[Rule]:
    """The device rules of `profile`: environment, resource names, counts."""
    rules = [nvidia_env_rule(profile), resource_name_rule(profile)]
    count = gpu_count_rule(profile)
    if count is not None:
        rules.append(count)
    return rules
