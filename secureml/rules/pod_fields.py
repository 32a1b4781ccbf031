"""The Pod fields the allowlist refuses that no other rule judges (`secureml.podFields`)."""

from __future__ import annotations

from secureml.pods.fields import DNS_POLICY, REFUSED_POD_FIELDS, TERMINATION_MESSAGE_PATH
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, container_rule_message, every_container
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD

_CONTAINER = (
    f"(!has(c.terminationMessagePath) || c.terminationMessagePath == "
    f"{quote(TERMINATION_MESSAGE_PATH)}) && "
    "(!has(c.env) || c.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.fileKeyRef))) && "
    "(!has(c.resizePolicy) || c.resizePolicy.all(r, r.restartPolicy == 'NotRequired'))"
)


def pod_field_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.podFields` of `profile` (every pod)."""
    pod_checks = [
        (f"!has({SPEC}.{field})", f"spec.{field} is not allowed in a step pod: remove it")
        for field in REFUSED_POD_FIELDS
    ]
    pod_checks.append(
        (
            f"!has({SPEC}.dnsPolicy) || {SPEC}.dnsPolicy == {quote(DNS_POLICY)}",
            f"spec.dnsPolicy must be {DNS_POLICY} (the default): remove it",
        )
    )
    expression = " && ".join([*(f"({c})" for c, _ in pod_checks), every_container(_CONTAINER)])
    message = container_rule_message(
        _CONTAINER,
        f"sets terminationMessagePath (only {TERMINATION_MESSAGE_PATH}: the kubelet mounts a "
        "writable file there), an env valueFrom.fileKeyRef, or a resizePolicy restartPolicy "
        "other than NotRequired (a resize would restart the container): remove it",
    )
    for check, text in reversed(pod_checks):
        message = f"(({check}) ? {message} : {quote(text)})"
    return [
        tenant_rule(
            profile,
            "secureml.podFields",
            "no pod field outside the allowlist (secureml/pods/fields.py): no dnsConfig, "
            "hostAliases, readiness or scheduling gates, pod resources, shared process namespace; "
            "dnsPolicy ClusterFirst; termination message at its default path; no env fileKeyRef",
            expression,
            message,
            scope=EVERY_POD,
        )
    ]
