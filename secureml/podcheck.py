"""`check-pod` as a library call: which rules judge, who judges, and the report.

`check_offline(files, OfflinePolicy(...))` judges pods with the rules of a TenantProfile or a Pod
Security level (optionally narrowed to some rule ids) through the CEL engine; `check_on_server(files,
ServerTarget(...))` asks a real API server by dry-run creates. Both return a `PodCheckReport`: the
policy that judged, its rule ids, one `PodVerdict` per pod, the counts and the JSON form documented
in docs/cli.md. The CLI only parses options and prints it; the compiler's preview and the benchmarks
call the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.errors import InputError
from secureml.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion
from secureml.verdicts import PodVerdict, judge_offline
from secureml.workloads import read_pods

if TYPE_CHECKING:
    from secureml.rules import Rule

SCHEMA = "secureml.dev/check-pod/v1"


@dataclass(frozen=True)
class OfflinePolicy:
    """The rules an offline check applies: exactly one of `profile` or `level`, then `only`."""

    profile: Path | None = None
    level: str | None = None  # "baseline" | "restricted"
    k8s_version: K8sVersion = DEFAULT_K8S_VERSION
    only: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerTarget:
    """The cluster a server check asks; `namespace` None: each pod's own, then the context's."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class PodCheckReport:
    """What judged (`policy`, `rules`) and what it decided about each pod."""

    policy: dict[str, Any]
    rules: list[str]
    verdicts: list[PodVerdict] = field(default_factory=list)

    @property
    def denied(self) -> int:
        return sum(1 for verdict in self.verdicts if verdict.findings)

    @property
    def exit_code(self) -> int:
        """0 when every pod is allowed, 1 when any is denied."""
        return 1 if self.denied else 0

    def summary(self) -> dict[str, int]:
        denied = self.denied
        return {
            "objects": len(self.verdicts),
            "allowed": len(self.verdicts) - denied,
            "denied": denied,
        }

    def to_json(self) -> dict[str, Any]:
        """`check-pod --format json` (schema in docs/cli.md)."""
        return {
            "schema": SCHEMA,
            "policy": self.policy,
            "rules": self.rules,
            "objects": [verdict.as_dict() for verdict in self.verdicts],
            "summary": self.summary(),
        }


def check_offline(files: Sequence[str], policy: OfflinePolicy) -> PodCheckReport:
    """Judge the pods in `files` (`-` is stdin) by the CEL rules `policy` selects."""
    rules, described = offline_rules(policy)
    return PodCheckReport(
        policy=described,
        rules=[rule.id for rule in rules],
        verdicts=judge_offline(read_pods(files), rules),
    )


def check_on_server(files: Sequence[str], target: ServerTarget) -> PodCheckReport:
    """Judge the pods in `files` by the API server's whole admission chain (dryRun=All)."""
    from secureml.cluster import check_pods_on_server, connect

    pods = read_pods(files)
    cluster = connect(target.kubeconfig, target.context)
    verdicts = check_pods_on_server(pods, target.namespace, cluster=cluster)
    policy = {
        "server": cluster.server,
        "kubeconfig": cluster.source,
        "namespace": target.namespace,
        "dryRun": "All",
    }
    return PodCheckReport(policy=policy, rules=[], verdicts=verdicts)


def offline_rules(policy: OfflinePolicy) -> tuple[list[Rule], dict[str, Any]]:
    """The rules of the profile or level (narrowed by `only`) and the report's `policy` entry."""
    from secureml.rules import rules_for_level, rules_for_profile

    if (policy.profile is None) == (policy.level is None):
        raise InputError(
            "give exactly one of --profile or --level",
            fix="e.g. --profile profiles/team-a.yaml or --level restricted",
        )
    described: dict[str, Any]
    if policy.profile is not None:
        from secureml.profile import load_profile

        tenant = load_profile(policy.profile)
        rules = rules_for_profile(tenant, policy.k8s_version)
        described = {"profile": tenant.metadata.name, "source": str(policy.profile)}
    else:
        assert policy.level is not None
        rules = rules_for_level(policy.level, policy.k8s_version)
        described = {"level": policy.level, "kubernetes": policy.k8s_version}
    if policy.only:
        known = {rule.id for rule in rules}
        unknown = sorted(set(policy.only) - known)
        if unknown:
            raise InputError(
                f"unknown rule id(s) {', '.join(unknown)} for this policy",
                fix=f"choose among: {', '.join(sorted(known))}",
            )
        rules = [rule for rule in rules if rule.id in policy.only]
    return rules, described
