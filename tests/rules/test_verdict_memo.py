"""Kept verdicts (`secureml.rules.verdict_memo`) change no verdict and no message.

Every outcome the engine takes from the memo must be the outcome evaluating would give: the
plain engine (which keeps nothing) is the reference, over pods that differ in exactly the fields
the kept rules read, over values of another type (`1` for `true`), and over random pods and
rules that use every construct `reads` models.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secureml.core.violation import Violation
from secureml.rules import rules_for_profile, verdict_memo
from secureml.rules.engine import evaluate, evaluate_plain
from secureml.rules.model import Rule
from tests.support.profiles import example_profile, reference_documents

PROFILE = "team-a"


@pytest.fixture(scope="module")
def step_pod() -> dict[str, Any]:
    """A pod the compiler previews for a reference pipeline under team-a (allowed)."""
    from secureml.pods.preview import preview_pods

    profile = example_profile(PROFILE)
    for documents in reference_documents(profile):
        pods = list(preview_pods(documents, profile).values())
        if evaluate_plain(pods[0], rules_for_profile(profile)) == []:
            return pods[0]
    raise AssertionError("no reference pipeline compiles to an allowed pod under team-a")


def _steps(pod: dict[str, Any], count: int) -> Iterator[dict[str, Any]]:
    """`count` copies of `pod`, each with its own step name (as a pipeline's steps differ)."""
    for index in range(count):
        step = copy.deepcopy(pod)
        step["metadata"]["name"] = f"{pod['metadata']['name']}-{index}"
        step["metadata"].setdefault("annotations", {})["workflows.argoproj.io/node-id"] = str(index)
        yield step


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "main")


def _unpinned_image(pod: dict[str, Any]) -> None:
    _main(pod)["image"] = _main(pod)["image"].split("@")[0] + ":latest"


def _root_group(pod: dict[str, Any]) -> None:
    pod["spec"].setdefault("securityContext", {})["runAsGroup"] = 0


def _host_mount(pod: dict[str, Any]) -> None:
    _main(pod).setdefault("volumeMounts", []).append({"name": "host", "mountPath": "/host"})
    pod["spec"]["volumes"].append({"name": "host", "emptyDir": {}})


def _extra_gpu(pod: dict[str, Any]) -> None:
    limits = _main(pod).setdefault("resources", {}).setdefault("limits", {})
    limits["nvidia.com/gpu"] = "2"
    pod["spec"]["initContainers"][0].setdefault("resources", {}).setdefault("limits", {})[
        "nvidia.com/gpu"
    ] = "1"


MUTATIONS = [_unpinned_image, _root_group, _host_mount, _extra_gpu]


def test_steps_that_differ_in_one_rule_relevant_field_still_get_every_violation(
    step_pod: dict[str, Any],
) -> None:
    """Forty steps of one component, judged in order with verdicts kept: every tenth differs
    in one field that a kept rule reads, and gets exactly the violations evaluating gives."""
    rules = rules_for_profile(example_profile(PROFILE))
    verdict_memo.forget()
    steps = list(_steps(step_pod, 40))
    for number, mutate in enumerate(MUTATIONS, start=1):
        mutate(steps[number * 10 - 1])
    denied = 0
    for index, pod in enumerate(steps):
        judged = evaluate(pod, rules)
        assert judged == evaluate_plain(pod, rules), index
        denied += bool(judged)
    assert denied == len(MUTATIONS)
    kept = verdict_memo.memo(tuple(rules))
    assert any(kept_rule.outcomes for kept_rule in kept.verdicts), "some verdicts were kept"


@pytest.mark.parametrize("other", [1, 1.0, "true", None])
def test_a_value_of_another_type_is_another_key(step_pod: dict[str, Any], other: Any) -> None:
    """`readOnly: 1` is not `readOnly: true` to CEL: the key of a rule reading it differs."""
    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    index = next(i for i, rule in enumerate(rules) if rule.id == "secureml.mountPaths")
    kept = verdict_memo.memo(rules)
    pods = []
    for value in (True, other):
        pod = copy.deepcopy(step_pod)
        _main(pod)["volumeMounts"][0]["readOnly"] = value
        pods.append(pod)
    keys = [kept.verdicts[index].key(verdict_memo.Pod(pod, None)) for pod in pods]
    assert keys[0] is not None and keys[1] is not None and keys[0] != keys[1]


@pytest.mark.parametrize("odd", [dt.date(2026, 1, 1), Ellipsis])
def test_a_pod_holding_what_the_key_cannot_say_exactly_is_not_keyed(
    step_pod: dict[str, Any], odd: Any
) -> None:
    """A date (marshal does not write it), or `...` where the key marks a field absent."""
    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    index = next(i for i, rule in enumerate(rules) if rule.id == "secureml.mountPaths")
    pod = copy.deepcopy(step_pod)
    _main(pod)["image"] = odd
    assert verdict_memo.memo(rules).verdicts[index].key(verdict_memo.Pod(pod, None)) is None


def _interned(value: Any) -> Any:
    """`value` with every string (keys too) the interned one."""
    if isinstance(value, dict):
        return {sys.intern(key): _interned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_interned(item) for item in value]
    return sys.intern(value) if isinstance(value, str) else value


def test_a_key_is_a_function_of_what_the_pod_holds(step_pod: dict[str, Any]) -> None:
    """Equal pods get equal keys for every rule, however their strings were made: each a new
    object, shared with another pod, interned (marshal's versions 3 and 4 write a string apart
    by whether it is interned and referenced more than once: equal steps of two compiles were
    keyed apart, and their rules taken for ones that differ on every step)."""
    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    forms = [
        step_pod,
        json.loads(json.dumps(step_pod)),  # every string a new object
        copy.deepcopy(step_pod),  # strings shared with step_pod
        _interned(step_pod),
    ]
    compared = 0
    for rule in rules:
        extract = verdict_memo._expressions_extractor((rule.expression, rule.message_expression))
        if extract is None:
            continue
        keys = {verdict_memo.Pod(pod, None).key(extract) for pod in forms}
        assert len(keys) == 1 and None not in keys, rule.id
        compared += 1
    assert compared >= len(rules) // 2


def test_a_tuple_read_whole_is_not_a_list(step_pod: dict[str, Any]) -> None:
    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    index = next(i for i, rule in enumerate(rules) if rule.id == "secureml.mountPaths")
    keys = []
    for kind in (tuple, list):
        pod = copy.deepcopy(step_pod)
        _main(pod)["volumeMounts"][0]["mountPath"] = kind(("a", "b"))
        keys.append(verdict_memo.memo(rules).verdicts[index].key(verdict_memo.Pod(pod, None)))
    assert None not in keys and keys[0] != keys[1]


def test_a_rule_whose_keys_never_repeat_is_no_longer_keyed(step_pod: dict[str, Any]) -> None:
    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    index = next(i for i, rule in enumerate(rules) if rule.id == "secureml.launcherEnv")
    verdict_memo.forget()
    kept = verdict_memo.memo(rules).verdicts[index]
    for number, pod in enumerate(_steps(step_pod, verdict_memo.TRIES + verdict_memo.WARMUP + 2)):
        _main(pod)["env"].append({"name": "STEP_NUMBER", "value": str(number)})
        evaluate(pod, rules)
    assert kept.key(verdict_memo.Pod(step_pod, None)) is None and not kept.outcomes
    verdict_memo.forget()
    assert kept.key(verdict_memo.Pod(step_pod, None)) is not None


def test_the_warm_ups_masks_are_freed_once_the_steady_rules_are_known(
    step_pod: dict[str, Any],
) -> None:
    """The masks judged while warming up (several MiB of programs for team-a) are not kept
    beside the ones that replace them."""
    import weakref

    from secureml.rules import engine

    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdict_memo, "_kept_steady", lambda rules: frozenset())  # none learnt
        verdict_memo.forget()
        pods = list(_steps(step_pod, verdict_memo.WARMUP + 2))
        evaluate(pods[0], rules)
        warm_up = [weakref.ref(group) for group in engine._groups(rules, frozenset())]
        for pod in pods[1:]:
            assert evaluate(pod, rules) == []
    steady = verdict_memo.memo(rules).steady
    assert steady, "team-a's short rules read the same on every step"
    assert [ref() for ref in warm_up] == [None] * len(warm_up)
    assert engine._groups(rules, steady) is engine._groups(rules, steady)


def test_a_second_pass_groups_the_rules_as_the_first_found_them(step_pod: dict[str, Any]) -> None:
    """What the first pass over a list of rules found steady is kept (on disk): the next pass,
    here or in another process, groups them so from its first pod and does not build its groups
    again at the 16th. A wrong hint changes no verdict (`_one_by_one` is the reference)."""
    from secureml.rules import engine

    rules = tuple(rules_for_profile(example_profile(PROFILE)))
    pods = list(_steps(step_pod, verdict_memo.WARMUP + 2))
    pods[-1]["spec"].setdefault("securityContext", {})["runAsGroup"] = 0
    verdict_memo.forget()
    for pod in pods:
        evaluate(pod, rules)
    learnt = verdict_memo.memo(rules).steady
    assert learnt
    verdict_memo.forget()
    evaluate(pods[0], rules)
    first = engine._groups(rules, verdict_memo.memo(rules).grouping())
    assert verdict_memo.memo(rules).grouping() == learnt
    judged = [evaluate(pod, rules) for pod in pods[1:]]
    assert engine._groups(rules, verdict_memo.memo(rules).steady) is first
    assert judged[-1] and judged[-1] == _one_by_one(pods[-1], rules)
    with pytest.MonkeyPatch.context() as patch:
        every = frozenset(range(len(rules)))
        patch.setattr(verdict_memo, "_kept_steady", lambda rules: every)  # a wrong hint
        verdict_memo.forget()
        assert [evaluate(pod, rules) for pod in pods] == [_one_by_one(pod, rules) for pod in pods]


# --- random pods and rules ------------------------------------------------------------------------

RULES = (
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
    " || c.securityContext.privileged != true)",
    "!has(object.metadata.labels) || !('x' in object.metadata.labels)"
    " || object.metadata.labels['x'] == 'a'",
    "['x', 'y'].all(l, !has(object.metadata.labels) || !(l in object.metadata.labels)"
    " || object.metadata.labels[l] != 'b')",
    "!has(object.metadata.labels) || !('z' in object.metadata.labels)",
    "size(object.spec.containers.filter(c, has(c.env) && c.env.exists(e, e.name == 'X'))) <= 1",
    "!has(object.spec.volumes) || object.spec.volumes.all(v, v.name.startsWith('v'))",
    "object.spec.containers.map(c, c.name)[0] != 'bad'",
    "object.spec.containers[size(object.spec.containers) - 1].name != 'bad'",
    "!has(object.metadata.annotations) || object.metadata.annotations.all(k,"
    " object.metadata.annotations[k] != 'no')",
    "object.spec.containers.all(c, !has(c.resources) || !has(dyn(c.resources).limits)"
    " || dyn(c.resources).limits.all(k, string(dyn(c.resources).limits[k]) != '9'))",
    "object.spec.containers.exists_one(c, c.name == 'a') || size(object.spec.containers) != 2",
    "(has(object.spec.os) ? object.spec.os : {'name': 'linux'}).name == 'linux'",
    "object.spec.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'X' ||"
    " (has(e.value) && e.value + 'z' != 'badz')))",
)
MESSAGE = "'first: ' + string(object.spec.containers[0].name)"

_scalars = st.sampled_from([True, False, 1, 0, 1.0, "true", "a", "b", "bad", None])
_containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "bad", "c"])},
        optional={
            "securityContext": st.fixed_dictionaries({}, optional={"privileged": _scalars}),
            "env": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["X", "Y"])}, optional={"value": _scalars}
                ),
                max_size=3,
            ),
            "resources": st.fixed_dictionaries(
                {}, optional={"limits": st.dictionaries(st.sampled_from(["cpu", "gpu"]), _scalars)}
            ),
        },
    ),
    min_size=1,
    max_size=3,
)
_pods = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(st.sampled_from(["x", "y", "z"]), _scalars),
                "annotations": st.dictionaries(
                    st.sampled_from(["k"]), st.sampled_from(["ok", "no"])
                ),
            },
        ),
        "spec": st.fixed_dictionaries(
            {"containers": _containers},
            optional={
                "volumes": st.lists(
                    st.fixed_dictionaries({"name": st.sampled_from(["v1", "w", "v2"])}), max_size=2
                ),
                "os": st.fixed_dictionaries({"name": st.sampled_from(["linux", "windows"])}),
            },
        ),
    }
)


DENIED: dict[str, Any] = {
    "metadata": {"labels": {"x": "b", "y": "b"}, "annotations": {"k": "no"}},
    "spec": {"containers": [{"name": "bad", "securityContext": {"privileged": True}}]},
}


def _one_by_one(pod: dict[str, Any], rules: tuple[Rule, ...]) -> list[Violation]:
    """Each rule judged alone and never kept: the engine as it was before it kept outcomes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdict_memo, "WORTH", 10**9)
        return [found for rule in rules for found in evaluate(pod, (rule,))]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_pods, min_size=5, max_size=25),
    st.sampled_from(["alone", "together", "split", "held"]),
)
def test_kept_outcomes_equal_evaluated_ones_on_random_pods(
    pods: list[dict[str, Any]], mode: str
) -> None:
    """A sequence of random pods drawn from few values, so that keys repeat, gets the violations
    and messages of each rule judged alone, whether every rule is keyed from the first pod
    ("alone"), none is and all are judged together ("together"), after eight pods the rules
    that read the same on most pods are judged together and that value kept ("split"), or every
    rule is keyed alone and after eight pods the outcomes of those that read the same on most
    pods are kept together ("held")."""
    rules = tuple(  # ids apart by mode: the engine groups a list's rules once
        Rule(f"r{index}-{mode}", f"rule {index}", text, MESSAGE, ("test",))
        for index, text in enumerate(RULES)
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdict_memo, "WORTH", 0 if mode in ("alone", "held") else 10**9)
        patch.setattr(verdict_memo, "WARMUP", 8 if mode in ("split", "held") else 0)
        verdict_memo.forget()
        pods = [DENIED, *pods, copy.deepcopy(DENIED)]  # a violation kept, then found kept
        judged = [evaluate(pod, rules) for pod in pods]
    assert judged == [_one_by_one(pod, rules) for pod in pods]
    assert judged[0] and judged[-1] == judged[0]
