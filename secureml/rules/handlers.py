"""No tenant command the kubelet runs outside the launcher: exec probes, hooks, restarts."""

from __future__ import annotations

from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, container_rule_message, every_container
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule

PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# Argo's emissary reads these from the container's env and then waits for a file before it runs
# the command (BEFORE) or after it exited (AFTER): the container holds its GPU with no launcher
# running, for anyone who can exec into it (KFP's compiler refuses them too: runtime.debug-pause).
DEBUG_PAUSE_PREFIX = "ARGO_DEBUG_PAUSE"
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


def debug_pause_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.noDebugPause`: no container of a step pauses Argo's emissary."""
    prefix = quote(DEBUG_PAUSE_PREFIX)
    predicate = (
        f"(!has(c.env) || c.env.all(e, !e.name.startsWith({prefix}))) && "
        f"(!has(c.envFrom) || c.envFrom.all(s, !has(s.prefix) || "
        f"(!s.prefix.startsWith({prefix}) && !{prefix}.startsWith(s.prefix))))"
    )
    tail = (
        f"sets {DEBUG_PAUSE_PREFIX}_* (in env, or through an envFrom prefix that can form it): "
        "Argo's emissary then holds the container, and its GPU, before or after the launcher "
        "runs, for whoever execs into it; remove it"
    )
    return [
        tenant_rule(
            profile,
            "secureml.noDebugPause",
            f"no {DEBUG_PAUSE_PREFIX}_BEFORE/_AFTER on any container of a step: Argo's emissary "
            "would hold the container with its GPU outside the launcher",
            every_container(predicate),
            container_rule_message(predicate, tail),
        )
    ]


def restart_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.noRestart`: a step runs once (Argo retries with a new pod)."""
    policy = f"{SPEC}.restartPolicy"
    no_container_restart = "!has(c.restartPolicy) && !has(c.restartPolicyRules)"
    return [
        tenant_rule(
            profile,
            "secureml.noRestart",
            "a step pod runs once: restartPolicy Never, and no container restartPolicy or "
            "restartPolicyRules (a restart re-runs main from the emptyDirs its first run could write)",
            f"has({policy}) && {policy} == 'Never' && {every_container(no_container_restart)}",
            f"!has({policy}) || {policy} != 'Never' ? 'pod restartPolicy must be Never (Argo "
            "retries a step with a new pod); a restart re-runs main from the emptyDirs its first "
            "run could write' : "
            + container_rule_message(
                no_container_restart,
                "sets restartPolicy or restartPolicyRules; remove it: a step's containers run once",
            ),
        )
    ]
