"""The attack corpus (tests/rules/attacks, docs/threat-model.md): every pod is denied, by the
rule its file names, under the example profiles; and nothing is denied because a rule failed to
evaluate (that would deny for the wrong reason)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.pods.workloads import pods_in_text
from secureml.rules import evaluate, rules_for_level, rules_for_profile
from secureml.rules.identity import JOB_CONTROLLERS
from tests.support.paths import ATTACKS_DIR
from tests.support.profiles import EXAMPLE_PROFILES, example_profile
from tests.support.submitted_pods import admitted

EXPECT = "test.secureml.dev/expect"
THREAT = "test.secureml.dev/threat"
ONLY_UNDER = "test.secureml.dev/profiles"
# An UPDATE attack: the file is the pod after the update, this names the allowed pod before it.
UPDATE_OF = "test.secureml.dev/update-of"
# Who creates the attack pod (request.userInfo.username), where it is not the pipeline runner.
CREATED_BY = "test.secureml.dev/created-by"
ATTACKS = sorted(ATTACKS_DIR.glob("*.yaml"))


@functools.cache
def _rules(profile_name: str) -> list:
    return rules_for_profile(example_profile(profile_name))


def _pod(path: Path) -> dict:
    (pod,) = list(pods_in_text(path.read_text(), source=str(path)))
    return pod.pod


def _old(pod: dict) -> dict | None:
    """The pod before the update for an UPDATE attack (`oldObject`), None for a CREATE."""
    before = pod["metadata"]["annotations"].get(UPDATE_OF)
    return _pod(ATTACKS_DIR.parent / "allowed" / before) if before else None


def test_corpus_size_and_threats() -> None:
    assert len(ATTACKS) >= 40
    threats = {_pod(p)["metadata"]["annotations"][THREAT] for p in ATTACKS}
    documented = (ATTACKS_DIR.parents[2] / "docs" / "threat-model.md").read_text()
    for threat in threats:
        assert f"| {threat} " in documented, f"{threat} is not in docs/threat-model.md"


@pytest.mark.parametrize("profile_name", EXAMPLE_PROFILES)
@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attack_denied(path: Path, profile_name: str) -> None:
    pod = _pod(path)
    annotations = pod["metadata"]["annotations"]
    violations = evaluate(
        pod, _rules(profile_name), old_obj=_old(pod), created_by=annotations.get(CREATED_BY)
    )
    assert violations, f"{path.name} is admitted under {profile_name}"
    assert not [v for v in violations if "could not be evaluated" in v.what]
    only_under = annotations.get(ONLY_UNDER, "").split()
    if not only_under or profile_name in only_under:
        ids = {v.rule for v in violations}
        assert annotations[EXPECT] in ids, f"{path.name} under {profile_name}: {sorted(ids)}"


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attack_message_names_the_offender(path: Path) -> None:
    """The messageExpression evaluates (no fallback to the static message) for the expected rule."""
    pod = _pod(path)
    profile_name = (pod["metadata"]["annotations"].get(ONLY_UNDER) or "team-a").split()[0]
    expected = pod["metadata"]["annotations"][EXPECT]
    rule = next(r for r in _rules(profile_name) if r.id == expected)
    created_by = pod["metadata"]["annotations"].get(CREATED_BY)
    (violation,) = evaluate(pod, [rule], old_obj=_old(pod), created_by=created_by)
    assert violation.what != rule.message or "container" not in rule.message_expression


def test_base_pod_of_the_corpus_is_allowed() -> None:
    """Each attack is one change away from a pod that team-a admits."""
    allowed = ATTACKS_DIR.parent / "allowed" / "team-a-timeslice.yaml"
    pod = _pod(allowed)
    assert evaluate(admitted(pod, example_profile("team-a")), _rules("team-a")) == []
    assert pod["metadata"]["labels"][contract.LABEL_ISOLATION] == "timeslice-shim"


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_nvidia_static_deployments_fail_both_levels(level: str) -> None:
    from tests.support.paths import fixture_dir

    static = fixture_dir("nvidia", "k8s-device-plugin", "deployments", "static")
    files = sorted(p for p in static.iterdir() if p.is_file())
    assert len(files) >= 5
    for path in files:
        pods = list(pods_in_text(path.read_text(), source=str(path)))
        assert pods, path.name
        for pod in pods:
            violations = evaluate(pod.pod, rules_for_level(level))
            assert violations, f"{path.name} {pod.kind}/{pod.name} passes {level}"
            assert not [v for v in violations if "could not be evaluated" in v.what]


@pytest.mark.parametrize(
    "path", [p for p in ATTACKS if UPDATE_OF in _pod(p)["metadata"]["annotations"]], ids=str
)
def test_update_attack_is_one_metadata_change_admitted_on_create(path: Path) -> None:
    """An UPDATE attack changes only metadata of an allowed pod (what a pod UPDATE can change);
    without `oldObject` (a CREATE, what `check-pod` sees) the immutability rule holds."""
    pod = _pod(path)
    before = _old(pod)
    assert before is not None and before["spec"] == pod["spec"]
    immutable = [r for r in _rules("team-a") if r.id == "secureml.platformMetadataImmutable"]
    assert evaluate(pod, immutable) == []
    assert [v.rule for v in evaluate(pod, immutable, old_obj=before)] == [
        "secureml.platformMetadataImmutable"
    ]
    assert evaluate(before, immutable, old_obj=before) == []


def test_a_pipeline_identity_comes_from_its_runner() -> None:
    """Class 8: the same step pod is admitted when the pipeline runner creates it and refused,
    naming the creator, when anyone else does; a pod without pipeline labels and without KFP's
    and Argo's containers is anyone's; a trainer node pod is the Job controller's."""
    pod = admitted(
        _pod(ATTACKS_DIR.parent / "allowed" / "team-a-timeslice.yaml"), example_profile("team-a")
    )
    rules = _rules("team-a")
    runner = example_profile("team-a").spec.identity.pipeline_runners[0]
    assert evaluate(pod, rules, created_by=runner) == []
    assert evaluate(pod, rules) == []  # offline, the runner creates it
    (violation,) = evaluate(pod, rules, created_by="alice@acme.example")
    assert violation.rule == "secureml.pipelineIdentity"
    assert "created by alice@acme.example" in violation.what
    identity = [r for r in rules if r.id == "secureml.pipelineIdentity"]
    unlabelled = {**pod, "metadata": {**pod["metadata"], "labels": {}}}
    assert evaluate(unlabelled, identity, created_by="alice@acme.example") != []  # kfp-launcher
    plain = {**unlabelled, "spec": {k: v for k, v in pod["spec"].items() if k != "initContainers"}}
    assert evaluate(plain, identity, created_by="alice@acme.example") == []
    node = {**pod, "metadata": {**pod["metadata"], "labels": {**pod["metadata"]["labels"]}}}
    node["metadata"]["labels"][contract.LABEL_TRAINER_NODE] = "true"
    assert evaluate(node, identity, created_by=runner) != []
    assert evaluate(node, identity, created_by=JOB_CONTROLLERS[0]) == []
    # An UPDATE is the immutability rule's: the identity rule judges CREATE only.
    assert evaluate(pod, identity, old_obj=pod, created_by="alice@acme.example") == []
