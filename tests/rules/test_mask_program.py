"""`cel_cpp.mask_program`: several rules judged by one program, bit `i` set where rule `i` is false,
and an error wherever one of them is an error or not a boolean (the engine then judges them one
by one)."""

from __future__ import annotations

from typing import Any

import pytest

from secureml.rules.cel import cpp as cel_cpp

RULES = ("object.a == 1", "object.b == 2", "object.c")


def _mask(pod: dict[str, Any]) -> Any:
    program = cel_cpp.mask_program(RULES)
    assert program is not None
    return program.eval(cel_cpp.activation(pod, None))


@pytest.mark.parametrize(
    ("pod", "bits"),
    [
        ({"a": 1, "b": 2, "c": True}, 0),
        ({"a": 1, "b": 3, "c": True}, 0b010),
        ({"a": 0, "b": 3, "c": False}, 0b111),
    ],
)
def test_each_false_rule_sets_its_bit(pod: dict[str, Any], bits: int) -> None:
    value = _mask(pod)
    assert value.type() == cel_cpp.INT and value.value() == bits


@pytest.mark.parametrize("pod", [{"a": 1, "b": 2, "c": "yes"}, {"a": 1, "b": 2}])
def test_a_rule_that_is_not_a_boolean_makes_the_whole_an_error(pod: dict[str, Any]) -> None:
    assert _mask(pod).type() == cel_cpp.ERROR


def test_what_does_not_compile_or_is_too_wide_has_no_mask() -> None:
    assert cel_cpp.mask_program(("object.a ==",)) is None
    assert cel_cpp.mask_program(()) is None
    assert cel_cpp.mask_program(("true",) * (cel_cpp.MASK_WIDTH + 1)) is None
    wide = cel_cpp.mask_program(tuple(f"object.a != {n}" for n in range(cel_cpp.MASK_WIDTH)))
    assert wide is not None
    value = wide.eval(cel_cpp.activation({"a": cel_cpp.MASK_WIDTH - 1}, None)).value()
    assert value == 1 << (cel_cpp.MASK_WIDTH - 1)
