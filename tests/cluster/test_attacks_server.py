"""Every attack pod of tests/rules/attacks, sent to the real API server with its tenant's bundle in
force: refused by the server, for the expected rule, and the offline verdict is the server's.

Whatever files the corpus holds are sent (the glob runs at collection). Each attack goes to the
namespace of the profile the corpus judges it under (the first of `test.secureml.dev/profiles`,
else team-a), the way it would reach a cluster:

- a CREATE attack is created for real (and deleted);
- an UPDATE attack (`test.secureml.dev/update-of`) creates the allowed pod it names, then updates
  its labels and annotations to the attack's (a dry run);
- an attack with `ephemeralContainers` creates the pod without them, then adds them through the
  `pods/ephemeralcontainers` subresource (a dry run): the API refuses ephemeral containers in a
  create, so this is the only way they reach a cluster.

The offline verdict is `secureml.rules.evaluate` over what the server's validating policies judge:
the pod after the tenant's mutating policy (`apply_mutations`, CREATE only), with `oldObject` for
updates. Verdicts are compared (admitted or refused); the rule the server names must be one the
offline engine finds first: PodSecurity names all its failed checks, else one of the two
ValidatingAdmissionPolicies names its first failed validation. `expected` is checked against the
server wherever it is the only rule the server could name; docs/admission-rules.md ("On a real API
server") lists what the server refuses before admission runs.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from secureml.cluster import Cluster
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.workloads import pods_in_text
from secureml.profile.model import TenantProfile
from secureml.rules import Rule, evaluate, rules_for_profile
from tests.harness.controlplane import ControlPlane
from tests.support.admission import (
    PIPELINE_RUNNER,
    ServerAnswer,
    create_pod,
    delete_pod,
    install_tenant,
    update_pod,
)
from tests.support.paths import ATTACKS_DIR
from tests.support.profiles import example_profile
from tests.support.submitted_pods import with_launcher_of

EXPECT = "test.secureml.dev/expect"
ONLY_UNDER = "test.secureml.dev/profiles"
UPDATE_OF = "test.secureml.dev/update-of"
CREATED_BY = "test.secureml.dev/created-by"
ATTACKS = sorted(ATTACKS_DIR.glob("*.yaml"))
ALLOWED_DIR = ATTACKS_DIR.parent / "allowed"


def _pod(path: Path) -> dict[str, Any]:
    (pod,) = list(pods_in_text(path.read_text(), source=str(path)))
    return pod.pod


@functools.cache
def _rules(name: str) -> list[Rule]:
    return rules_for_profile(example_profile(name))


def profile_of(pod: dict[str, Any]) -> str:
    return (pod["metadata"]["annotations"].get(ONLY_UNDER) or "team-a").split()[0]


def judge(
    cluster: Cluster, pod: dict[str, Any], profile: TenantProfile
) -> tuple[ServerAnswer, list[str]]:
    """(the server's answer, the offline engine's rule ids) for the attack as it reaches a cluster:
    with `main`'s launcher as the compiler writes it for `profile`, so the attack is its one change."""
    pod = with_launcher_of(pod, profile)
    namespace = profile.spec.namespace
    rules = _rules(profile.metadata.name)
    before_name = pod["metadata"]["annotations"].get(UPDATE_OF)
    ephemeral = pod["spec"].get("ephemeralContainers")
    if before_name is None and ephemeral is None:
        created_by = pod["metadata"]["annotations"].get(CREATED_BY, PIPELINE_RUNNER)
        answer = create_pod(cluster, pod, namespace, created_by)
        if answer.created is not None:
            delete_pod(cluster, answer.created)
        mutated = apply_mutations(_in(pod, namespace), profile)
        offline = evaluate(mutated, rules, created_by=created_by)
        return answer, [v.rule for v in offline]
    if before_name is not None:
        base = with_launcher_of(_pod(ALLOWED_DIR / before_name), profile)
    else:
        base = copy.deepcopy(pod)
        del base["spec"]["ephemeralContainers"]
    stored = create_pod(cluster, base, namespace)
    assert stored.created is not None, (
        f"the pod the attack starts from is refused: {stored.message}"
    )
    old = apply_mutations(_in(base, namespace), profile)
    new = copy.deepcopy(old)
    try:
        if before_name is not None:
            answer = update_pod(cluster, stored.created, pod)
            for key in ("labels", "annotations"):
                new["metadata"][key] = copy.deepcopy(pod["metadata"].get(key, {}))
        else:
            answer = add_ephemeral_containers(cluster, stored.created, ephemeral)
            new["spec"]["ephemeralContainers"] = copy.deepcopy(ephemeral)
    finally:
        delete_pod(cluster, stored.created)
    return answer, [v.rule for v in evaluate(new, rules, old_obj=old)]


def add_ephemeral_containers(
    cluster: Cluster, stored: dict[str, Any], containers: list[dict[str, Any]]
) -> ServerAnswer:
    """`kubectl debug`'s request: the pod with ephemeral containers, to the subresource (dry run)."""
    from secureml.admission.server import findings_of
    from secureml.cluster.connection import ServerRefusedError

    body = copy.deepcopy(stored)
    body["spec"]["ephemeralContainers"] = copy.deepcopy(containers)
    meta = body["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/ephemeralcontainers"
    try:
        response = cluster.request("PUT", path, query={"dryRun": "All"}, body=body)
    except ServerRefusedError as refusal:
        return ServerAnswer(None, tuple(findings_of(refusal)), refusal.message)
    return ServerAnswer(response.body)


def _in(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    placed = copy.deepcopy(pod)
    placed["metadata"]["namespace"] = namespace
    return placed


# Attacks the server neutralises before its validating policies run, so it admits them: what it
# stores is safe (checked). docs/admission-rules.md, "On a real API server".
DEFUSED_BY_API = {
    "t23-deprecated-service-account-alias": "the API sets the deprecated spec.serviceAccount to "
    "spec.serviceAccountName when both are given: the alias never reaches admission",
}
# Attacks the Pod API refuses as invalid before admission (a refusal, not by a rule).
INVALID_PODS = {
    "t08-gpu-in-requests-only": "an extended resource in requests needs an equal limit",
    "t18-kfp-driver-mig-in-requests": "an extended resource in requests needs an equal limit",
    "t15-windows-host-process": "hostProcess containers need hostNetwork: true",
    "t37-resize-restarts-main": "a RestartContainer resize policy needs a pod restartPolicy other "
    "than Never (which secureml.noRestart requires)",
    "t01-windows-exemption": "the mutating policy's readOnlyRootFilesystem is forbidden in a "
    "Windows pod",
}


def ensure_runtime_class(k8s_cluster: ControlPlane, name: str) -> None:
    """The RuntimeClass an attack names exists, as on a cluster whose nodes offer that handler:
    otherwise the RuntimeClass admission refuses the pod before the policies judge it."""
    body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
            "handler": name}  # fmt: skip
    status, answer = k8s_cluster.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", body)
    assert status in (201, 409), answer  # 409: there already


def collides_with_the_platform(pod: dict[str, Any], profile: TenantProfile) -> bool:
    """The mutating policy's volumes, mounts or init container would repeat a name or path of the
    pod's: the mutated pod is invalid and the API refuses it (the designed fail-closed answer)."""
    from secureml.pods.admitted import invalid_after_mutation

    return invalid_after_mutation(apply_mutations(pod, profile)) is not None


def firsts(rule_ids: list[str], rules: list[Rule]) -> tuple[set[str], set[str]]:
    """What the server may name for these offline findings: PodSecurity's failed checks (it runs
    first and names all), else the first finding of either ValidatingAdmissionPolicy (each names
    its first failed validation; when both deny, the server reports one of them)."""
    from secureml.rules.scope import EVERY_POD

    pss = {r for r in rule_ids if r.startswith("pss.")}
    scope = {rule.id: rule.scope for rule in rules}
    order = {rule.id: index for index, rule in enumerate(rules)}
    heads = set()
    for every_pod in (True, False):
        of_policy = [r for r in rule_ids if r not in pss and (scope[r] == EVERY_POD) is every_pod]
        if of_policy:
            heads.add(min(of_policy, key=order.__getitem__))
    return pss, heads


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attack_refused_by_the_server(k8s_cluster: ControlPlane, path: Path) -> None:
    pod = _pod(path)
    profile = example_profile(profile_of(pod))
    rules = _rules(profile.metadata.name)
    cluster = install_tenant(k8s_cluster, profile)
    if "runtimeClassName" in pod["spec"]:
        ensure_runtime_class(k8s_cluster, pod["spec"]["runtimeClassName"])
    answer, offline = judge(cluster, pod, profile)
    server = [finding.rule for finding in answer.findings]
    if path.stem in DEFUSED_BY_API:
        assert answer.created is not None and offline, (answer.message, offline)
        assert evaluate(answer.created, rules) == []
        return
    if path.stem in INVALID_PODS or collides_with_the_platform(
        _in(pod, profile.spec.namespace), profile
    ):
        # The Pod API refuses it before admission; `check-pod` (the pod as written) refuses it too.
        assert set(server) == {"k8s.validation"}, answer.message
        assert evaluate(pod, rules) != []
        return
    # The verdict is the offline engine's (on the pod as the policies see it).
    assert answer.admitted is not bool(offline), (offline, answer.message)
    if answer.created is not None:
        # Defused by the mutating policy (e.g. a writable root made read-only): the stored pod
        # passes every rule.
        assert evaluate(answer.created, rules) == []
        return
    # The rule: the server names what the offline engine finds first (module docstring).
    pss, heads = firsts(offline, rules)
    if pss:
        assert set(server) == pss, answer.message
    else:
        assert len(server) == 1 and server[0] in heads, (answer.message, heads)
    expected = pod["metadata"]["annotations"][EXPECT]
    if expected in pss or (not pss and heads == {expected}):
        assert expected in server, (server, answer.message)


TEAM_A_STEPS = sorted(ALLOWED_DIR.glob("team-a-*.yaml"))


@pytest.mark.parametrize("path", TEAM_A_STEPS, ids=[p.stem for p in TEAM_A_STEPS])
def test_an_allowed_step_pod_is_admitted_by_the_server(
    k8s_cluster: ControlPlane, path: Path
) -> None:
    """The neighbours of the attacks (an httpGet probe, shared memory at /dev/shm, ...) are created
    by the real server with team-a's bundle in force, as the offline engine says."""
    pod = _pod(path)
    profile = example_profile("team-a")
    answer, offline = judge(install_tenant(k8s_cluster, profile), pod, profile)
    assert offline == [] and answer.created is not None, answer.message
