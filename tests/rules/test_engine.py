"""The offline engine: the projection it hands CEL changes no verdict or message; errors deny."""

from __future__ import annotations

from pathlib import Path

import cel

from secureml.pods.workloads import pods_in_text
from secureml.rules import Rule, evaluate, rules_for_level, rules_for_profile
from secureml.rules.engine import admission_view, compiled
from tests.support.paths import ATTACKS_DIR, FIXTURES, fixture_dir
from tests.support.profiles import EXAMPLE_PROFILES, example_profile


def _unprojected(pod: dict, rules: list[Rule]) -> list[tuple[str, str]]:
    """Evaluation on the whole pod, the plain way: each rule's scope, then its expression (as on
    CREATE: `oldObject` null)."""
    context = cel.Context({"object": admission_view(pod), "oldObject": None})
    out = []
    for rule in rules:
        if rule.scope and compiled(rule.scope).execute(context) is False:
            continue
        if compiled(rule.expression).execute(context) is not True:
            out.append((rule.id, compiled(rule.message_expression).execute(context)))
    return out


def _pods(*, kyverno: bool) -> list[dict]:
    paths = sorted(ATTACKS_DIR.glob("*.yaml")) + sorted(
        (ATTACKS_DIR.parent / "allowed").glob("*.yaml")
    )
    suite = FIXTURES / "kyverno-pod-security" / "pod-security"
    if kyverno and suite.is_dir():
        paths += sorted(suite.glob("*/*/.kyverno-test/resource.yaml"))
    pods = []
    for path in paths:
        pods += [p.pod for p in pods_in_text(Path(path).read_text(), source=str(path))]
    return pods


def test_projection_changes_nothing() -> None:
    """Pod Security over every corpus pod, each example profile over the secureml pods."""
    fixture_dir("kyverno-pod-security", "pod-security")  # the corpus, or a skip that says so
    cases = [(rules_for_level(level), _pods(kyverno=True)) for level in ("baseline", "restricted")]
    cases += [
        (rules_for_profile(example_profile(n)), _pods(kyverno=False)) for n in EXAMPLE_PROFILES
    ]
    assert len(cases[0][1]) > 500
    for rules, pods in cases:
        for pod in pods:
            got = [(v.rule, v.what) for v in evaluate(pod, rules)]
            assert got == _unprojected(pod, rules), pod["metadata"].get("name")


def test_errors_and_non_booleans_deny() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    broken = Rule("x.error", "static", "object.spec.missing.field == 1", "'never'", ("level:test",))
    not_bool = Rule("x.type", "static", "'yes'", "'never'", ("level:test",))
    (error, wrong_type) = evaluate(pod, [broken, not_bool])
    assert error.rule == "x.error" and "could not be evaluated" in error.what
    assert wrong_type.rule == "x.type" and "not a boolean" in wrong_type.what


def test_message_falls_back_to_the_static_message() -> None:
    pod = {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}
    rule = Rule("x.msg", "static message", "false", "object.nope", ("level:test",))
    assert [v.what for v in evaluate(pod, [rule])] == ["static message"]


def test_a_rule_out_of_scope_is_skipped_and_a_broken_scope_keeps_it() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    deny = "object.spec.containers.all(c, c.image != 'x')"
    in_scope = Rule("x.in", "in", deny, "'in'", ("level:test",), "object.metadata.name == 'p'")
    out_of_scope = Rule(
        "x.out", "out", deny, "'out'", ("level:test",), "object.metadata.name != 'p'"
    )
    broken = Rule(
        "x.broken", "broken", deny, "'broken'", ("level:test",), "object.spec.missing.field"
    )
    not_bool = Rule("x.type", "type", deny, "'type'", ("level:test",), "'yes'")
    assert [v.rule for v in evaluate(pod, [in_scope, out_of_scope, broken, not_bool])] == [
        "x.in",
        "x.broken",
        "x.type",
    ]


def test_old_object_is_projected_and_null_on_create() -> None:
    """`oldObject` is the pod before an UPDATE, through the same projection; null on CREATE."""
    rule = Rule(
        "t.old",
        "labels unchanged",
        "oldObject == null || oldObject.metadata.labels == object.metadata.labels",
        "'changed'",
        (),
    )
    pod = {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": []}}
    changed = {"metadata": {"labels": {"a": "2"}}, "spec": {"containers": []}}
    assert evaluate(pod, [rule]) == []
    assert evaluate(pod, [rule], old_obj=pod) == []
    assert [v.rule for v in evaluate(changed, [rule], old_obj=pod)] == ["t.old"]
