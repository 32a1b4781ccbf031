"""No command of the tenant's that the kubelet runs outside the launcher: exec probes and hooks.

The kubelet runs an `exec` probe or `postStart`/`preStop` hook inside the container but not as the
launcher's child: before the identity check and the scrub, unseen by the NVML watchdog, and
possibly holding GPU memory while scrub-after runs. Step pods carry none, on any container.
"""

from __future__ import annotations

from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import container_rule_message, every_container
from secureml.rules.model import Rule

PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")


def _no_exec(handler: str) -> str:
    return f"(!has({handler}) || !has({handler}.exec))"


def handler_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.noExecHandlers` for `profile`'s step pods."""
    probes = " && ".join(_no_exec(f"c.{probe}") for probe in PROBES)
    hooks = " && ".join(_no_exec(f"c.lifecycle.{hook}") for hook in HOOKS)
    predicate = f"({probes} && (!has(c.lifecycle) || ({hooks})))"
    tail = (
        "runs a command in an exec probe or lifecycle hook, outside the launcher; remove it "
        "(an httpGet, tcpSocket or grpc probe runs nothing in the container)"
    )
    return [
        tenant_rule(
            profile,
            "secureml.noExecHandlers",
            "no exec probe (liveness, readiness, startup) and no exec postStart/preStop hook on "
            "any container of a step: the kubelet runs them outside the launcher",
            every_container(predicate),
            container_rule_message(predicate, tail),
        )
    ]
