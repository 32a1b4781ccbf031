"""`secureml.rules.cel.text`: string literals and label tests, read back by both CEL engines secureml runs.

Every literal is evaluated by the Rust engine (`cel`, the rules engine's plain path) and by Google's
C++ CEL (`cel_expr_python`, of cel-go's family, which the API server runs); each must give back
exactly the Python string it was made from.
"""

from __future__ import annotations

import json
from typing import Any

import cel
import pytest
from cel_expr_python import cel as cel_cpp
from hypothesis import given, settings
from hypothesis import strategies as st

from secureml.bundle.mutation.jsonpatch_cel import label_test
from secureml.pods.mutation.model import LabelIs
from secureml.rules.cel.text import label_in, label_is, label_present, quote, string_list
from tests.support.cel_strings import STRINGS

_CPP_ENV = cel_cpp.NewEnv(variables={"object": cel_cpp.Type.DYN})


def _rust(expression: str, obj: dict[str, Any] | None = None) -> Any:
    return cel.evaluate(expression, {"object": obj or {}})


def _cpp(expression: str, obj: dict[str, Any] | None = None) -> Any:
    program = _CPP_ENV.compile(expression)
    value = program.eval(_CPP_ENV.Activation({"object": obj or {}})).value()
    return [item.value() for item in value] if isinstance(value, list) else value


def _both(expression: str, obj: dict[str, Any] | None = None) -> tuple[Any, Any]:
    return _rust(expression, obj), _cpp(expression, obj)


@pytest.mark.parametrize("text", STRINGS, ids=[ascii(s)[:40] for s in STRINGS])
def test_a_quoted_string_reads_back_unchanged_in_both_engines(text: str) -> None:
    assert _both(quote(text)) == (text, text)


# No deadline: each example compiles two expressions, slow on a loaded 2-core CI machine.
@settings(deadline=None)
@given(st.text())
def test_every_string_reads_back_unchanged_in_both_engines(text: str) -> None:
    assert _both(quote(text)) == (text, text)


@settings(deadline=None)
@given(st.lists(st.text(), max_size=4))
def test_a_string_list_reads_back_unchanged(items: list[str]) -> None:
    assert _both(string_list(items)) == (items, items)


def test_no_invisible_character_is_written_raw() -> None:
    literal = quote("a\x00\u200b\u2028\ue000\n")
    assert literal == "'a\\u0000\\u200b\\u2028\\ue000\\n'"
    assert literal.isprintable()


def test_a_lone_surrogate_is_refused() -> None:
    """No CEL string holds one; a JSON-style `\\ud83d` escape is refused by both parsers."""
    with pytest.raises(ValueError, match="surrogate"):
        quote("half \ud83d")
    for engine in (_rust, _cpp):
        with pytest.raises(Exception):  # noqa: B017 - each binding raises its own error type
            engine(json.dumps("\U0001f600"))  # '"\\ud83d\\ude00"': what json.dumps writes


KEY = "secureml.dev/isolation"
PODS = {
    "no metadata labels": {"metadata": {}},
    "other label only": {"metadata": {"labels": {"app": "x"}}},
    "empty value": {"metadata": {"labels": {KEY: ""}}},
    "mig": {"metadata": {"labels": {KEY: "mig"}}},
    "dedicated": {"metadata": {"labels": {KEY: "dedicated"}}},
}


@pytest.mark.parametrize("name", PODS)
def test_label_tests_agree_with_the_pod_in_both_engines(name: str) -> None:
    pod = PODS[name]
    labels = pod["metadata"].get("labels", {})
    cases = {
        label_present(KEY): KEY in labels,
        label_is(KEY, "mig"): labels.get(KEY) == "mig",
        label_in(KEY, ["mig", "dedicated"]): labels.get(KEY) in ("mig", "dedicated"),
        label_in(KEY, []): False,
    }
    for expression, expected in cases.items():
        assert _both(expression, pod) == (expected, expected), expression


@pytest.mark.parametrize("name", PODS)
@pytest.mark.parametrize("condition", [LabelIs(KEY), LabelIs(KEY, ("mig",)), LabelIs("app")])
def test_a_mutation_condition_holds_where_its_cel_does(name: str, condition: LabelIs) -> None:
    """`LabelIs.holds` (the Python twin) and its CEL (`label_test`) are the same test."""
    pod = PODS[name]
    expected = condition.holds(pod["metadata"].get("labels", {}))
    assert _both(label_test(condition), pod) == (expected, expected)


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_the_short_cut_for_plain_ascii_writes_what_escaping_each_character_writes(
    text: str,
) -> None:
    from secureml.rules.cel.text import _escaped

    try:
        expected = "'" + _escaped(text) + "'"
    except ValueError:
        with pytest.raises(ValueError, match="surrogate"):
            quote(text)
        return
    assert quote(text) == expected
