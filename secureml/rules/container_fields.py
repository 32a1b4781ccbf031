"""The field pins every system container shares: KFP's, Argo's and the platform's runtime init."""

from __future__ import annotations

from secureml.pods.system_shapes import (
    CAPABILITIES_DROP,
    CONTAINER_FIELDS,
    CONTAINER_SCHEMA_FIELDS,
    NATIVE_RESOURCES,
    PULL_POLICIES,
    SECCOMP_TYPE,
    SECURITY_CONTEXT,
    SECURITY_CONTEXT_SCHEMA_FIELDS,
    TERMINATION_MESSAGE_PATH,
    TERMINATION_MESSAGE_POLICIES,
)
from secureml.rules.cel.text import quote, string_list

# Fields of the EphemeralContainer schema only: never on a container of the other lists.
_EPHEMERAL_ONLY = ("targetContainerName",)


def refused_fields(lst: str, allowed: tuple[str, ...] = CONTAINER_FIELDS) -> tuple[str, ...]:
    """The Container fields of list `lst` outside `allowed`."""
    return tuple(
        f
        for f in CONTAINER_SCHEMA_FIELDS
        if f not in allowed and (lst == "ephemeralContainers" or f not in _EPHEMERAL_ONLY)
    )


def resources_ok(var: str = "c") -> str:
    native = string_list(NATIVE_RESOURCES)
    r = f"dyn({var}.resources)"
    return (
        f"(!has({var}.resources) || ((!has({r}.limits) || {r}.limits.all(k, k in {native})) && "
        f"(!has({r}.requests) || {r}.requests.all(k, k in {native})) && !has({r}.claims)))"
    )


def security_context_ok(var: str = "c") -> str:
    """CEL: container `var`'s security context is KFP's/Argo's hardening or stronger."""
    sc = f"{var}.securityContext"
    checks = [
        f"!has({sc}.{f})"
        for f in SECURITY_CONTEXT_SCHEMA_FIELDS
        if f not in SECURITY_CONTEXT and f not in ("capabilities", "seccompProfile")
    ]
    for field, value in SECURITY_CONTEXT.items():
        if value == "positive":
            checks.append(f"(!has({sc}.{field}) || {sc}.{field} > 0)")
        else:
            checks.append(f"(!has({sc}.{field}) || {sc}.{field} == {str(value).lower()})")
    checks.append(
        f"(!has({sc}.capabilities) || (!has({sc}.capabilities.add) && "
        f"has({sc}.capabilities.drop) && {sc}.capabilities.drop == {string_list(CAPABILITIES_DROP)}))"
    )
    checks.append(
        f"(!has({sc}.seccompProfile) || ({sc}.seccompProfile.type == {quote(SECCOMP_TYPE)} && "
        f"!has({sc}.seccompProfile.localhostProfile)))"
    )
    return f"(!has({sc}) || ({' && '.join(checks)}))"


def common_ok(lst: str, var: str = "c", allowed: tuple[str, ...] = CONTAINER_FIELDS) -> str:
    """CEL: only the shape's fields, with the API's defaults where they are set."""
    absent = " && ".join(f"!has({var}.{f})" for f in refused_fields(lst, allowed))
    return (
        f"({absent} && "
        f"(!has({var}.imagePullPolicy) || {var}.imagePullPolicy in {string_list(PULL_POLICIES)}) && "
        f"(!has({var}.terminationMessagePath) || "
        f"{var}.terminationMessagePath == {quote(TERMINATION_MESSAGE_PATH)}) && "
        f"(!has({var}.terminationMessagePolicy) || "
        f"{var}.terminationMessagePolicy in {string_list(TERMINATION_MESSAGE_POLICIES)}) && "
        f"{resources_ok(var)} && {security_context_ok(var)})"
    )


def runtime_container_fields(lst: str = "initContainers", var: str = "c") -> str:
    """CEL: the platform's runtime init container carries only the fields it is injected with
    (and the API's defaults), with the same security-context pins as KFP's and Argo's own."""
    return common_ok(lst, var)
