"""Which pods a rule is in force for, defined once as CEL: every pod, or step pods.

The system containers' shapes: docs/admission-rules.md ("KFP and Argo pod shapes").
"""

from __future__ import annotations

from secureml.core import contract
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.rules.cel.reference import SPEC, every_container, spec_bound
from secureml.rules.cel.text import image_of_repository, quote, string_list

EVERY_POD = ""

# Resources a KFP system pod may ask for: the kubelet's own, never an extended (device) resource.
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def system_image(var: str = "c") -> str:
    """CEL: the container `var` runs one of KFP's or Argo's own images (any tag or digest).

    The repository is compared on whole path segments (`_cel.image_of_repository`), so
    `kfp-driver-debug` and `kfp-driver/shell` are other repositories. The domain of a reference
    ends at its first `/` and a path component cannot hold `:` or `@`, so nothing after `REPO:` can
    name another repository; a malformed tag or digest there is refused by the container runtime's
    reference parser (the pod does not start). The image policy admits the same references
    (`bundle.imagepolicy.system_image_globs`).
    """
    tests = " || ".join(image_of_repository(var, repo) for repo in contract.KFP_SYSTEM_IMAGES)
    return f"(has({var}.image) && ({tests}))"


ARGO_LOG_LEVELS = ("debug", "info", "warn", "error")
ARGO_LOG_FORMATS = ("text", "json")
NUMBERS = tuple(str(n) for n in range(10))  # glog and KFP log levels
KFP_LAUNCHER_COPY_ARGS = ("--copy", contract.KFP_LAUNCHER_BINARY)
# What else KFP's compiler may pass to the launcher's copy step (flag names and their values).
KFP_LAUNCHER_COPY_EXTRA = ("--cache_disabled", "--log_level", "--publish_logs", "true", "false")
ARGO_LOG_FLAGS_SIZE = 6


def argo_log_flags(argv: str, start: int) -> str:
    """CEL: `argv[start:start+6]` is Argo's `--loglevel L --log-format F --gloglevel N`."""
    parts = (
        ("--loglevel", ARGO_LOG_LEVELS),
        ("--log-format", ARGO_LOG_FORMATS),
        ("--gloglevel", NUMBERS),
    )
    return " && ".join(
        f"{argv}[{start + 2 * i}] == {quote(flag)} && {argv}[{start + 2 * i + 1}] in "
        f"{string_list(values)}"
        for i, (flag, values) in enumerate(parts)
    )


def system_container(var: str = "c") -> str:
    """CEL: the container `var` is one of KFP's or Argo's own, by name, image and command.

    Exactly the shapes of this module's docstring; any other container (a tenant's image, or a
    system image with another name, command or args) is not a system container.
    """
    argo = contract.ARGOEXEC_REPOSITORY
    executor = (
        f"(({var}.name == {quote(contract.ARGO_INIT_CONTAINER)} || "
        f"{var}.name == {quote(contract.ARGO_WAIT_CONTAINER)}) && {image_of_repository(var, argo)} && "
        f"has({var}.command) && size({var}.command) == {2 + ARGO_LOG_FLAGS_SIZE} && "
        f"{var}.command[0] == 'argoexec' && {var}.command[1] == {var}.name && "
        f"{argo_log_flags(f'{var}.command', 2)} && !has({var}.args))"
    )
    copy_args = string_list(KFP_LAUNCHER_COPY_ARGS)
    extra = string_list((*KFP_LAUNCHER_COPY_EXTRA, *NUMBERS))
    launcher = (
        f"({var}.name == {quote(contract.KFP_LAUNCHER_CONTAINER)} && "
        f"{image_of_repository(var, contract.KFP_LAUNCHER_REPOSITORY)} && has({var}.command) && "
        f"{var}.command == {string_list([contract.KFP_LAUNCHER_COPY_COMMAND])} && "
        f"has({var}.args) && size({var}.args) >= 2 && "
        f"{var}.args[0] == {quote(KFP_LAUNCHER_COPY_ARGS[0])} && "
        f"{var}.args[1] == {quote(KFP_LAUNCHER_COPY_ARGS[1])} && "
        f"{var}.args.all(a, a in {copy_args} || a in {extra}))"
    )
    end = 2 + ARGO_LOG_FLAGS_SIZE
    driver = (
        f"({var}.name == {quote(contract.KFP_MAIN_CONTAINER)} && "
        f"{image_of_repository(var, contract.KFP_DRIVER_REPOSITORY)} && has({var}.command) && "
        f"size({var}.command) == {end + 2} && "
        f"{var}.command[0] == {quote(contract.ARGO_EXECUTOR_BINARY)} && "
        f"{var}.command[1] == 'emissary' && {argo_log_flags(f'{var}.command', 2)} && "
        f"{var}.command[{end}] == '--' && "
        f"{var}.command[{end + 1}] == {quote(contract.KFP_DRIVER_COMMAND)})"
    )
    return f"(has({var}.image) && ({executor} || {launcher} || {driver}))"


def native_resources_only(var: str = "c") -> str:
    """CEL: container `var` asks for cpu, memory and ephemeral storage only (no GPU)."""
    native = string_list(NATIVE_RESOURCES)
    return (
        f"(!has({var}.resources) || ("
        f"(!has(dyn({var}.resources).limits) || dyn({var}.resources).limits.all(k, k in {native})) && "
        f"(!has(dyn({var}.resources).requests) || dyn({var}.resources).requests.all(k, k in {native}))))"
    )


# `containers` first: a step pod's `main` runs the tenant's image and ends the test at once.
_MAIN_FIRST = ("containers", *(name for name in CONTAINER_LISTS if name != "containers"))


def _kfp_system_pod() -> str:
    images = every_container(system_container(), lists=_MAIN_FIRST)
    no_gpu = (
        f"{every_container(native_resources_only())} && "
        f"(!has({SPEC}.resourceClaims) || size({SPEC}.resourceClaims) == 0)"
    )
    return spec_bound(f"{images} && {no_gpu}")


KFP_SYSTEM_POD = _kfp_system_pod()
STEP_POD = f"!({KFP_SYSTEM_POD})"
STEP_POD_CONDITION_NAME = "secureml-step-pod"
