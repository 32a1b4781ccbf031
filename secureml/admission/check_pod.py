"""`check-pod` as a library call: which rules judge, who judges (offline or a server), a report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.errors import InputError
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion
from secureml.core.violation import Violation
from secureml.pods.verdict import PodVerdict
from secureml.pods.workloads import PodObject, read_pods

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile
    from secureml.rules import Rule

SCHEMA = "secureml.dev/check-pod/v1"


@dataclass(frozen=True)
class OfflinePolicy:
    """The rules an offline check applies: exactly one of `profile` or `level`, then `only`."""

    profile: Path | None = None
    level: str | None = None  # "baseline" | "restricted"
    k8s_version: K8sVersion = DEFAULT_K8S_VERSION
    only: tuple[str, ...] = ()
    mutated: bool = False  # the pods already went through the tenant's mutating policy
    before: tuple[str, ...] = ()  # files of the pods before an UPDATE: the pods are UPDATEs


@dataclass(frozen=True)
class ServerTarget:
    """The cluster a server check asks; `namespace` None: each pod's own, then the context's."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str | None = None
    # Impersonation (kubectl's --as/--as-group): the pods are created as that user, e.g. the
    # pipeline runner, so that secureml.pipelineIdentity judges them as KFP would create them.
    as_user: str | None = None
    as_group: str | None = None


@dataclass(frozen=True)
class PodCheckReport:
    """What judged (`policy`, `rules`) and what it decided about each pod."""

    policy: dict[str, Any]
    rules: list[str]
    verdicts: list[PodVerdict] = field(default_factory=list)
    # rule id -> what the rule requires (offline checks): a denied pod's fix
    requirements: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a person should know about the input

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
    rules, described, profile = _offline(policy)
    pods = read_pods(files)
    if policy.before:
        verdicts = judge_updates(pods, _by_name(read_pods(policy.before)), rules)
    else:
        verdicts = judge_creates(pods, rules, profile, mutated=policy.mutated)
    if policy.before or policy.mutated:
        described = {**described, "request": "UPDATE" if policy.before else "CREATE (mutated)"}
    notes = []
    if profile is not None:
        own = profile.spec.namespace
        notes = [
            f"{pod.kind}/{pod.name} ({pod.file}#{pod.doc_index}) is in namespace {pod.namespace}, "
            f"not {own}: the cluster judges it by the profile of {pod.namespace}'s tenant, not by "
            f"{profile.metadata.name}'s (judged here as if it were in {own})"
            for pod in pods
            if pod.namespace not in (None, own)
        ]
    return PodCheckReport(
        policy=described,
        rules=[rule.id for rule in rules],
        verdicts=verdicts,
        requirements={rule.id: rule.message for rule in rules},
        notes=notes,
    )


def judge_offline(pods: Iterable[PodObject], rules: Sequence[Rule]) -> list[PodVerdict]:
    """Each pod judged by the CEL rule engine against `rules`."""
    from secureml.rules import evaluate

    return [PodVerdict(pod, tuple(evaluate(pod.pod, rules))) for pod in pods]


def judge_creates(
    pods: Sequence[PodObject],
    rules: Sequence[Rule],
    profile: TenantProfile | None,
    *,
    mutated: bool = False,
) -> list[PodVerdict]:
    """Each pod as a CREATE: defaults, the tenant's mutations, the Pod API's validity, the rules.
    The pods are the caller's, just read: each is changed in place into the pod as admitted."""
    from secureml.pods.admitted import VALIDATION_RULE_ID, as_created, invalid_after_mutation

    verdicts = []
    for pod in pods:
        admitted = as_created(pod.pod, profile, mutated=mutated, in_place=True)
        invalid = invalid_after_mutation(admitted)
        if invalid is not None:
            verdicts.append(PodVerdict(pod, (Violation(VALIDATION_RULE_ID, invalid),)))
        else:
            verdicts.extend(judge_offline([replace(pod, pod=admitted)], rules))
    return verdicts


def judge_updates(
    pods: Sequence[PodObject],
    before: dict[tuple[str | None, str], PodObject],
    rules: Sequence[Rule],
) -> list[PodVerdict]:
    """Each pod as an UPDATE of the pod of its namespace and name in `before` (`oldObject`)."""
    from secureml.pods.admitted import api_defaults
    from secureml.rules import evaluate

    verdicts = []
    for pod in pods:
        old = before.get((pod.namespace, pod.name))
        if old is None:
            raise InputError(
                f"{pod.file}: {pod.kind}/{pod.name} has no pod of that name before the update",
                fix="give the pod as it was before the update in the --before file",
            )
        found = evaluate(api_defaults(pod.pod), rules, old_obj=api_defaults(old.pod))
        verdicts.append(PodVerdict(pod, tuple(found)))
    return verdicts


def _by_name(pods: Sequence[PodObject]) -> dict[tuple[str | None, str], PodObject]:
    return {(pod.namespace, pod.name): pod for pod in pods}


def check_on_server(files: Sequence[str], target: ServerTarget) -> PodCheckReport:
    """Judge the pods in `files` by the API server's whole admission chain (dryRun=All)."""
    from secureml.admission.server import check_pods_on_server
    from secureml.cluster import connect

    pods = read_pods(files)
    cluster = connect(target.kubeconfig, target.context)
    if target.as_user is not None:
        cluster.api.default_headers["Impersonate-User"] = target.as_user
        if target.as_group is not None:
            cluster.api.default_headers["Impersonate-Group"] = target.as_group
    verdicts = check_pods_on_server(pods, target.namespace, cluster=cluster)
    policy = {
        "server": cluster.server,
        "kubeconfig": cluster.source,
        "namespace": target.namespace,
        "as": target.as_user,
        "dryRun": "All",
    }
    return PodCheckReport(policy=policy, rules=[], verdicts=verdicts)


def offline_rules(policy: OfflinePolicy) -> tuple[list[Rule], dict[str, Any]]:
    """The rules of the profile or level (narrowed by `only`) and the report's `policy` entry."""
    rules, described, _ = _offline(policy)
    return rules, described


def _offline(policy: OfflinePolicy) -> tuple[list[Rule], dict[str, Any], TenantProfile | None]:
    from secureml.rules import rules_for_level, rules_for_profile

    if (policy.profile is None) == (policy.level is None):
        raise InputError(
            "give exactly one of --profile or --level",
            fix="e.g. --profile profiles/team-a.yaml or --level restricted",
        )
    described: dict[str, Any]
    tenant: TenantProfile | None = None
    if policy.profile is not None:
        from secureml.profile.model import load_profile

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
    return rules, described, tenant
