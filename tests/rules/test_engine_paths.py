"""The fast path (C++ CEL) and the plain path (Rust CEL) give the same violations and messages.

Over every pod of the corpus (the attack and allowed pods of tests/rules, Kyverno's Pod Security
suite) and every pod the compiler previews for the example pipelines, for Pod Security baseline
and restricted and each example profile: `evaluate` must equal `evaluate_plain` exactly.
"""

from __future__ import annotations

import pytest

from secureml.rules import rules_for_level, rules_for_profile
from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.engine import evaluate, evaluate_plain
from tests.rules.test_engine import _pods
from tests.support.paths import fixture_dir
from tests.support.profiles import EXAMPLE_PROFILES, example_profile, reference_documents


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_pod_security_paths_agree_on_every_corpus_pod(level: str) -> None:
    fixture_dir("kyverno-pod-security", "pod-security")  # the corpus, or a skip that says so
    rules = rules_for_level(level)
    pods = _pods(kyverno=True)
    assert len(pods) > 500
    assert all(cel_cpp.boolean_program(rule.expression) for rule in rules), "all run fast"
    for pod in pods:
        assert evaluate(pod, rules) == evaluate_plain(pod, rules), pod["metadata"].get("name")


@pytest.mark.parametrize("name", EXAMPLE_PROFILES)
def test_profile_paths_agree_on_every_corpus_pod(name: str) -> None:
    rules = rules_for_profile(example_profile(name))
    fast = [cel_cpp.boolean_program(rule.expression) for rule in rules]
    assert sum(p is not None for p in fast) >= len(rules) - 2, "nearly every rule runs fast"
    for pod in _pods(kyverno=True):
        assert evaluate(pod, rules) == evaluate_plain(pod, rules), pod["metadata"].get("name")


def test_paths_agree_on_previewed_pods() -> None:
    """The compiler's previewed executor and driver pods, for every example profile that compiles
    the reference pipelines, judged by each profile's rules (allowed or not)."""
    from secureml.pods.preview import preview_driver_pods, preview_pods

    profiles = [example_profile(name) for name in EXAMPLE_PROFILES]
    judged = 0
    for profile in profiles:
        for documents in reference_documents(profile):
            pods = {**preview_pods(documents, profile), **preview_driver_pods(documents, profile)}
            for pod in pods.values():
                for other in profiles:
                    rules = rules_for_profile(other)
                    assert evaluate(pod, rules) == evaluate_plain(pod, rules)
                    judged += 1
    assert judged > 50


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36", "1.37"])
@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_fast_paths_cut_to_the_named_fields_changes_no_verdict(
    level: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pod Security's rules name no env: the fast engine gets only the fields they name
    (`engine._cut`). Judged again with the whole pod, every corpus pod and previewed pod gets the
    same violations and messages."""
    from secureml.rules import engine

    fixture_dir("kyverno-pod-security", "pod-security")  # the corpus, or a skip that says so
    rules = rules_for_level(level, version)
    assert "env" not in engine.fields_named(tuple(rules))  # the cut is in force
    pods = [*_pods(kyverno=True), *_previewed_pods()]
    cut = [evaluate(pod, rules) for pod in pods]
    monkeypatch.setattr(engine, "_cut", lambda pod, fields: pod)
    assert [evaluate(pod, rules) for pod in pods] == cut
    assert sum(bool(found) for found in cut) > 100  # many denials among them


def _previewed_pods() -> list[dict[str, object]]:
    from secureml.pods.preview import preview_pods

    pods: list[dict[str, object]] = []
    for name in EXAMPLE_PROFILES:
        profile = example_profile(name)
        for documents in reference_documents(profile):
            pods += preview_pods(documents, profile).values()
    return pods
