"""The launcher and the shim come from the platform's runtime image (`secureml.runtimeInjected`)."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.profile.runtime_image import injected
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, every_container
from secureml.rules.cel.text import label_is, quote, string_list
from secureml.rules.container_fields import runtime_container_fields
from secureml.rules.model import Rule
from secureml.rules.scope import system_image
from secureml.rules.token_mount import SERVICE_ACCOUNT_TOKEN_MOUNT

VOLUME = quote(contract.RUNTIME_VOLUME)


def _read_only_mount(var: str = "m") -> str:
    """CEL: mount `var` is the runtime volume, read-only at RUNTIME_DIR, no subPath."""
    return (
        f"({var}.name == {VOLUME} && {var}.mountPath == {quote(contract.RUNTIME_DIR)} && "
        f"has({var}.readOnly) && {var}.readOnly == true && !has({var}.subPath) && "
        f"!has({var}.subPathExpr))"
    )


def _install_mount(var: str = "m") -> str:
    """CEL: mount `var` is the init container's read-write mount of the runtime volume."""
    return (
        f"({var}.name == {VOLUME} && {var}.mountPath == {quote(contract.RUNTIME_DIR)} && "
        f"(!has({var}.readOnly) || {var}.readOnly == false) && !has({var}.subPath) && "
        f"!has({var}.subPathExpr))"
    )


def runtime_container(profile: TenantProfile, var: str = "c") -> str:
    """CEL: container `var` is the platform's runtime init container, exactly as the mutating
    policy adds it; "false" when the profile injects no runtime."""
    image = profile.spec.runtime.image
    if image is None:
        return "false"
    return (
        f"({var}.name == {quote(contract.RUNTIME_INIT_CONTAINER)} && has({var}.image) && "
        f"{var}.image == {quote(image)} && has({var}.command) && "
        f"{var}.command == {string_list(contract.RUNTIME_INSTALL_COMMAND)} && "
        f"!has({var}.args) && !has({var}.env) && {runtime_container_fields(var=var)} && "
        f"has({var}.volumeMounts) && size({var}.volumeMounts.filter(m, {_install_mount()})) == 1 && "
        f"{var}.volumeMounts.all(m, {_install_mount()} || {SERVICE_ACCOUNT_TOKEN_MOUNT}))"
    )


def runtime_image_container(profile: TenantProfile, var: str = "c") -> str:
    """CEL: container `var` is named and imaged as the runtime init container (its shape is
    `secureml.tenantContainers`' and `secureml.runtimeInjected`'s concern)."""
    image = profile.spec.runtime.image
    if image is None:
        return "false"
    return (
        f"({var}.name == {quote(contract.RUNTIME_INIT_CONTAINER)} && has({var}.image) && "
        f"{var}.image == {quote(image)})"
    )


def _checks(profile: TenantProfile) -> list[tuple[str, str]]:
    """(CEL that holds, message when it does not), in the order they are reported."""
    name = quote(contract.RUNTIME_INIT_CONTAINER)
    init = f"{SPEC}.initContainers"
    # First, before KFP's and Argo's own init containers: on shim steps every container mounts
    # the preload file naming the injected shim, which must exist before any of them starts.
    one_init = (
        f"has({init}) && size({init}.filter(c, c.name == {name})) == 1 && "
        f"{runtime_container(profile, f'{init}[0]')}"
    )
    volumes = f"{SPEC}.volumes"
    medium, size = (quote(contract.RUNTIME_VOLUME_EMPTY_DIR[k]) for k in ("medium", "sizeLimit"))
    empty_dir = (
        f"has({volumes}) && {volumes}.exists(v, v.name == {VOLUME}) && "
        f"{volumes}.all(v, v.name != {VOLUME} || (has(v.emptyDir) && "
        f"has(v.emptyDir.medium) && v.emptyDir.medium == {medium} && "
        # sizeLimit is a Quantity, which the API server's type checker does not know: read it dyn
        f"has(dyn(v.emptyDir).sizeLimit) && string(dyn(v.emptyDir).sizeLimit) == {size}))"
    )
    mounted = (
        f"{SPEC}.containers.all(c, {system_image()} || (has(c.volumeMounts) && "
        f"c.volumeMounts.exists(m, {_read_only_mount()})))"
    )
    no_other_mount = every_container(
        f"{runtime_container(profile)} || !has(c.volumeMounts) || "
        f"c.volumeMounts.all(m, m.name != {VOLUME} || {_read_only_mount()})"
    )
    command = " ".join(contract.RUNTIME_INSTALL_COMMAND)
    return [
        (_preload_is_the_injected_shim_or_nothing(), _PRELOAD_MESSAGE),
        (
            one_init,
            f"the pod's first init container must be its one {contract.RUNTIME_INIT_CONTAINER}, "
            f"exactly the platform's: image {profile.spec.runtime.image}, command {command}, no args or "
            f"env, one read-write mount of {contract.RUNTIME_VOLUME} at {contract.RUNTIME_DIR}",
        ),
        (
            empty_dir,
            f"the volume {contract.RUNTIME_VOLUME} must exist and be the platform's emptyDir: "
            f"medium Memory, sizeLimit {contract.RUNTIME_VOLUME_SIZE_LIMIT}",
        ),
        (
            mounted,
            f"the step's container must mount {contract.RUNTIME_VOLUME} read-only at "
            f"{contract.RUNTIME_DIR} (the injected launcher and shim)",
        ),
        (
            no_other_mount,
            f"no container but {contract.RUNTIME_INIT_CONTAINER} may mount "
            f"{contract.RUNTIME_VOLUME} other than read-only at {contract.RUNTIME_DIR}",
        ),
    ]


_PRELOAD_MESSAGE = (
    f"the annotation {contract.ANNOTATION_SHIM_PRELOAD}, the step's {contract.SHIM_PRELOAD_FILE} "
    "(which the injected launcher's own loader reads too), must name exactly the injected shim "
    f"{contract.RUNTIME_SHIM} on a shim step and be empty or absent on any other"
)


def _preload_is_the_injected_shim_or_nothing() -> str:
    """CEL: the preload annotation, the content of the step's /etc/ld.so.preload, names the
    injected shim on shim steps (the mutating policy sets it so) and nothing elsewhere."""
    annotations = "object.metadata.annotations"
    key = quote(contract.ANNOTATION_SHIM_PRELOAD)
    shim_step = label_is(contract.LABEL_ISOLATION, contract.ISOLATION_LEVELS[1])  # timeslice-shim
    present = f"has({annotations}) && {key} in {annotations}"
    return (
        f"({shim_step}) ? ({present} && {annotations}[{key}] == {quote(contract.RUNTIME_SHIM)}) "
        f": (!({present}) || {annotations}[{key}] == '')"
    )


def runtime_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.runtimeInjected` where the profile names a runtime image (step pods only)."""
    if not injected(profile):
        return []
    checks = _checks(profile)
    expression = " && ".join(f"({cel})" for cel, _ in checks)
    message = quote(checks[-1][1])
    for cel, text in reversed(checks[:-1]):
        message = f"(({cel}) ? {message} : {quote(text)})"
    return [
        tenant_rule(
            profile,
            "secureml.runtimeInjected",
            f"the launcher and the shim come from the platform's runtime image: init container "
            f"{contract.RUNTIME_INIT_CONTAINER} ({profile.spec.runtime.image}) filling the "
            f"emptyDir {contract.RUNTIME_VOLUME}, mounted read-only at {contract.RUNTIME_DIR}",
            expression,
            message,
        )
    ]
