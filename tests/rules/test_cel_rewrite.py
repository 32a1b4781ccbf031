"""`cel_rewrite`: the fast engine's rewritten text has the original's value, and is only written
where it pays (test_engine_paths compares the engines on every real pod besides)."""

from __future__ import annotations

from typing import Any

import pytest

from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.cel.rewrite import MATCHES, VARIABLE, rewritten

NAMES = "['LD_PRELOAD', 'LD_AUDIT', 'CUDA_DISABLE_CONTROL', 'NVIDIA_VISIBLE_DEVICES']"
POD: dict[str, Any] = {
    "spec": {
        "containers": [
            {"name": "a", "image": "r/x@sha256:" + "0" * 64, "env": [{"name": "LD_AUDIT"}]},
            {"name": "b[0]", "image": "r/x:1", "command": ["launcher-v2"], "env": []},
        ]
    }
}
EXPRESSIONS = [
    f"object.spec.containers.all(c, c.env.all(e, !(e.name in {NAMES})))",
    f"object.spec.containers.exists(c, c.env.exists(e, e.name in {NAMES}))",
    "object.spec.containers.all(c, c.name in ['a', 'b[0]', 'c', 'd]'] || c.name == 'x')",
    "object.spec.containers.all(c, c.image.matches('@sha256:[0-9a-f]{64}$'))",
    "object.spec.containers.exists(c, c.image.matches('@sha256:[0-9a-f]{64}$'))",
    "object.spec.containers.filter(c, has(c.command) && c.command == ['launcher-v2']).size() == 1",
    "[1, 3, 5, 7].exists(t, object.spec.containers.size() > t - 1 && [1, 2, 3, 4].all(j, j > 0))",
    "object.spec.containers.all(c, c.name.matches('^[a-z]$'))",  # false for `b[0]`
    "object.spec.containers.all(c, c.image.matches('('))",  # a bad pattern: an error either way
    f"object.spec.containers[0].env[0].name in {NAMES}",  # outside a comprehension: left alone
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_rewritten_text_has_the_original_value(expression: str) -> None:
    bound = cel_cpp.activation(POD, None)
    original = cel_cpp.program(expression)
    fast = cel_cpp.boolean_program(expression)
    assert original is not None and fast is not None
    expected, got = original.eval(bound), fast.eval(bound)
    if expected.type() == cel_cpp.ERROR:
        assert got.type() == cel_cpp.ERROR
    else:
        assert got.value() is expected.value()


def test_lists_in_a_comprehension_body_are_built_once() -> None:
    text = rewritten(EXPRESSIONS[0])
    assert text is not None
    assert text.startswith(f"[[dyn({NAMES})]].all({VARIABLE}, ")
    assert f"e.name in {VARIABLE}[0]" in text


def test_only_lists_worth_it_are_hoisted() -> None:
    assert rewritten(EXPRESSIONS[-1]) is None  # not in a comprehension's body
    assert rewritten("object.a.all(x, x in ['a', 'b'])") is None  # shorter than four
    assert rewritten("object.a.all(x, x in [x, 'b', 'c', 'd'])") is None  # not constant
    assert rewritten("object.a.all(x, object.b[0] == x)") is None  # an index, not a list


def test_strings_are_not_taken_apart() -> None:
    text = rewritten(EXPRESSIONS[2])
    assert text is not None
    assert "'b[0]'" in text.split(".all(", 1)[0] and "'d]'" in text  # moved whole, intact
    assert rewritten("object.a.all(x, x == r'[1, 2, 3, 4]')") is None  # raw: left as it is
    assert rewritten("object.a.all(x, x == b'abcd')") is None  # bytes too
    # a string holding one letter b is a string, not a prefix: the list is still built once
    assert rewritten("object.a.all(x, x in ['a', 'b', 'c', 'd'])") is not None


def test_constant_patterns_use_the_compiled_once_matches() -> None:
    text = rewritten(EXPRESSIONS[3])
    assert text == EXPRESSIONS[3].replace(".matches(", f".{MATCHES}(")
    assert rewritten("object.a.all(x, x.matches(object.p))") is None  # not a constant pattern


def test_a_non_boolean_value_stays_no_boolean() -> None:
    """The caller judges anything but a boolean by the plain engine: the rewrite keeps a value
    that is not a boolean one that is not a boolean (the engine gives it through, or an error)."""
    expression = f"object.spec.containers.map(c, c.name in {NAMES} ? 'x' : 'y')[1]"
    fast, original = cel_cpp.boolean_program(expression), cel_cpp.program(expression)
    assert fast is not None and original is not None
    bound = cel_cpp.activation(POD, None)
    assert original.eval(bound).value() == "y"
    assert fast.eval(bound).value() not in (True, False)
