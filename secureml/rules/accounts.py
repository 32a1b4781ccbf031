"""Whose rights a pod runs with: the runner's service account, never group 0."""

from __future__ import annotations

from secureml.core.contract import RUNNER_NAME
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import (
    SPEC,
    every_container,
    has_path,
    name_first,
    offending_containers,
)
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD, system_image


def _service_account(profile: TenantProfile) -> Rule:
    runner = quote(RUNNER_NAME)
    return tenant_rule(
        profile,
        "secureml.serviceAccount",
        f"pod must run as the bundle's runner service account {RUNNER_NAME}",
        f"has({SPEC}.serviceAccountName) && {SPEC}.serviceAccountName == {runner} && "
        f"(!has({SPEC}.serviceAccount) || {SPEC}.serviceAccount == {runner})",
        f"'pod runs as service account ' + (has({SPEC}.serviceAccountName) ? "
        f"{SPEC}.serviceAccountName : 'default') + ', not the runner {RUNNER_NAME}'",
        EVERY_POD,
    )


def _groups(profile: TenantProfile) -> Rule:
    pod_sc = f"{SPEC}.securityContext"
    pod_ok = (
        f"(!has({pod_sc}) || ("
        f"(!has({pod_sc}.runAsGroup) || {pod_sc}.runAsGroup != 0) && "
        f"(!has({pod_sc}.fsGroup) || {pod_sc}.fsGroup != 0) && "
        f"(!has({pod_sc}.supplementalGroups) || !(0 in {pod_sc}.supplementalGroups))))"
    )
    pod_sets_group = has_path(SPEC, "securityContext", "runAsGroup")
    container_group = has_path("c", "securityContext", "runAsGroup")
    # The pod-level setting is read once, outside the container loops.
    predicate_if_pod = f"(!{container_group} || c.securityContext.runAsGroup != 0)"
    predicate_otherwise = (
        f"({container_group} ? c.securityContext.runAsGroup != 0 : {system_image()})"
    )
    containers = (
        f"({pod_sets_group} ? {every_container(predicate_if_pod)} : "
        f"{every_container(predicate_otherwise)})"
    )
    tail = "must not run with group 0, and a step's own container must set runAsGroup"
    pod_message = quote(
        "pod must not set runAsGroup, fsGroup or supplementalGroups to (or with) group 0"
    )
    message = (
        f"!{pod_ok} ? {pod_message} : ({pod_sets_group} ? "
        f"{name_first(offending_containers(predicate_if_pod), 'container', tail, pod_message)} : "
        f"{name_first(offending_containers(predicate_otherwise), 'container', tail, pod_message)})"
    )
    return tenant_rule(
        profile,
        "secureml.groupNotRoot",
        "no group 0 (runAsGroup, fsGroup, supplementalGroups; pod and containers), and a step's "
        "own container runs with a set runAsGroup",
        f"{pod_ok} && {containers}",
        message,
        EVERY_POD,
    )


def account_rules(profile: TenantProfile) -> list[Rule]:
    """The class 8 rules of `profile` (every pod)."""
    return [_service_account(profile), _groups(profile)]
