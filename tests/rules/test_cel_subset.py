"""The catalogue's CEL stays inside the subset the API server and the Python engine share, and
the number patterns used for annotation bounds are exact."""

from __future__ import annotations

import re

import cel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secureml.rules import Rule, rules_for_level, rules_for_profile
from secureml.rules.cel.reference import int_range_regex
from secureml.rules.cel.text import quote
from secureml.rules.engine import compiled
from tests.support.cel_literals import type_errors
from tests.support.paths import REPO
from tests.support.profiles import EXAMPLE_PROFILES, example_profile

# Functions and operators (as `cel` names them) that Kubernetes' CEL environment also has, with
# the same meaning. No Kubernetes library function the Python engine lacks (join, split, find,
# quantity, ...) and none the Python engine adds (stdlib extensions) may appear.
SHARED = {
    "!_", "-_", "@in", "@not_strictly_false", "_!=_", "_&&_", "_+_", "_-_", "_==_", "_<_", "_<=_",
    "_>_", "_>=_", "_?_:_", "_[_]", "_||_", "matches", "size", "startsWith", "endsWith",
    "contains", "string", "int", "dyn",
}  # fmt: skip
# `dyn` only around a container's `resources`: kube-apiserver 1.36's type checker does not resolve
# `resources.limits`/`requests` (maps of Quantity) and warns "undefined field" on every VAP reading
# them; `dyn(c.resources).limits` type-checks clean there and reads the same at runtime.


def all_rules() -> list[Rule]:
    rules = rules_for_level("baseline") + rules_for_level("restricted")
    rules += rules_for_level("baseline", "1.37")  # the 1.37 sysctls list
    for name in EXAMPLE_PROFILES:
        rules += rules_for_profile(example_profile(name))
    return rules


RULES = all_rules()


def test_ids_are_stable_and_unique_per_policy() -> None:
    for name in EXAMPLE_PROFILES:
        ids = [r.id for r in rules_for_profile(example_profile(name))]
        assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"(pss|secureml)\.[A-Za-z_]+(\.[A-Za-z_]+)?", r.id) for r in RULES)


@pytest.mark.parametrize("rule", RULES, ids=[f"{i}-{r.id}" for i, r in enumerate(RULES)])
def test_only_shared_functions(rule: Rule) -> None:
    for text in (rule.expression, rule.message_expression, rule.scope or "true"):
        used = set(compiled(text).functions())
        assert used <= SHARED, used - SHARED
        assert "?." not in text and ".?" not in text and "optional." not in text
        # every variable is `object`, `oldObject` (null on CREATE, as the engine binds it) or a
        # comprehension variable bound in the text
        for name in compiled(text).variables():
            assert name in ("object", "oldObject") or re.search(rf"\(\s*{name}\s*,", text), name


@pytest.mark.parametrize("rule", RULES, ids=[f"{i}-{r.id}" for i, r in enumerate(RULES)])
def test_literals_are_homogeneous(rule: Rule) -> None:
    """The API server compiles with cel-go's homogeneous aggregate literals; the Python engine
    does not, so a mixed literal would pass here and be refused at create (tests/support/cel_literals.py)."""
    for text in (rule.expression, rule.message_expression, rule.scope or "true"):
        assert type_errors(text) == [], text


@pytest.mark.parametrize(
    ("expression", "refused"),
    [
        # Each row's verdict was taken from kube-apiserver 1.36.3 (a VAP created with dryRun=All).
        ("['a', 'b']", False),
        ("[1, 'a']", True),
        ("{'name': 'x', 'readOnly': true}", True),
        ("{'a': 1, 2: 1}", True),
        ("[[1], ['a']]", True),
        ("[[1], []]", False),
        ("[null, 'a']", True),
        ("[1u, 1]", True),
        ("[object.x, 1]", True),  # dyn is not int for this check
        ("[object.x, object.y]", False),
        ("[[object.spec], ['a']]", True),
        ("['p' + object.x, 'b']", False),  # one `_+_` overload: string
        ("[object.x * object.y, 1]", True),
        ("[size(object.x) - 1, 2]", False),
        ("[object.x.map(c, c.name), ['a']]", True),
        ("[['a'].map(s, s)[0], 'a']", False),
        ("['a'] + [1]", True),  # no `_+_` overload for list(string), list(int)
        ("true ? 'a' : 1", True),
        ("[object.spec].all(spec, spec.containers.all(c, c.name in ['a', 'b']))", False),
        ('JSONPatch{op: "add", path: "/a", value: {"name": "v", "ro": true}}', True),
        ('JSONPatch{op: "add", path: "/a", value: Object.spec.volumes{name: "v", '
         'csi: Object.spec.volumes.csi{driver: "d", readOnly: true}}}', False),
    ],
)  # fmt: skip
def test_homogeneous_literal_check_is_the_servers(expression: str, refused: bool) -> None:
    assert bool(type_errors(expression)) is refused, type_errors(expression)


def test_homogeneous_literal_check_names_the_types() -> None:
    (error,) = type_errors("{'name': 'x', 'readOnly': true}")
    assert "expected type 'string' but found 'bool'" in error


def test_bound_variables_never_shadow_object() -> None:
    for rule in RULES:
        assert "(object," not in rule.expression.replace(" ", "")


@settings(max_examples=300, deadline=None)
@given(
    high=st.integers(min_value=1, max_value=2**40),
    probe=st.integers(min_value=0, max_value=2**41),
)
def test_int_range_regex_is_exact(high: int, probe: int) -> None:
    pattern = "^" + int_range_regex(1, high) + "$"
    python = re.fullmatch(int_range_regex(1, high), str(probe)) is not None
    engine = cel.compile(f"{quote(str(probe))}.matches({quote(pattern)})").execute({})
    assert python == engine == (1 <= probe <= high)
    assert cel.compile(f"{quote('0' + str(high))}.matches({quote(pattern)})").execute({}) is False


def test_regex_syntax_is_re2_compatible() -> None:
    """No look-around, back-references or possessive forms, which RE2 rejects."""
    for rule in RULES:
        for literal in re.findall(r"matches\('((?:[^'\\]|\\.)*)'\)", rule.expression + rule.scope):
            assert not re.search(r"\(\?[=!<]|\\[1-9]|[*+?}]\+", literal), (rule.id, literal)


def test_every_rule_id_is_documented() -> None:
    doc = (REPO / "docs" / "admission-rules.md").read_text()
    single = profile_with_single_strategy()
    for rule in RULES + rules_for_profile(single):
        assert f"`{rule.id}`" in doc, rule.id


def profile_with_single_strategy():
    import yaml

    from secureml.profile.model import TenantProfile

    data = yaml.safe_load((REPO / "profiles" / "team-conf.yaml").read_text())
    data["spec"]["gpu"]["migStrategy"] = "single"
    data["spec"]["gpu"]["mig"]["allowedProfiles"] = ["3g.40gb"]
    data["spec"]["gpu"]["quota"] = {"nvidia.com/gpu": 2}
    return TenantProfile.from_dict(data, source="single")


def test_single_strategy_mig_rule() -> None:
    from secureml.rules import evaluate

    rule = next(
        r
        for r in rules_for_profile(profile_with_single_strategy())
        if r.id == "secureml.migProfile.single"
    )
    pod = {
        "metadata": {"labels": {"secureml.dev/isolation": "mig"}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"},
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    assert evaluate(pod, [rule]) == []
    pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3-MIG-7g.80gb"
    assert [v.rule for v in evaluate(pod, [rule])] == ["secureml.migProfile.single"]
