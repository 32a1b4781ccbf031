"""kfp's name sanitiser, remembered during a compile: the same pipeline spec, kfp's own function
back afterwards (also when the build fails).

No `from __future__ import annotations`: kfp reads the component's annotations as types."""

import pytest
from kfp import dsl
from kfp.dsl import utils

from secureml._kfp.names import remembered_names


@dsl.component(base_image="python:3.11")
def step(x: int) -> int:
    return x + 1


def _chain(x: int = 0) -> None:
    value = x
    for _ in range(12):
        value = step(x=value).output
    step(x=value).set_display_name("Last Step!")


def test_the_spec_is_the_same_with_remembered_names() -> None:
    plain = dsl.pipeline(name="Chain Of Steps")(_chain)
    with remembered_names():
        remembered = dsl.pipeline(name="Chain Of Steps")(_chain)
    assert plain.pipeline_spec == remembered.pipeline_spec


def test_kfp_gets_its_function_back() -> None:
    original = utils.maybe_rename_for_k8s
    with pytest.raises(RuntimeError), remembered_names():
        assert utils.maybe_rename_for_k8s is not original
        assert utils.maybe_rename_for_k8s("A_B") == original("A_B") == "a-b"
        raise RuntimeError
    assert utils.maybe_rename_for_k8s is original


@pytest.mark.parametrize(
    ("name", "collection"),
    [
        ("a", []),
        ("a", ["a"]),
        ("a", ["a", "a-2", "a-3", "b"]),
        ("a", ["a", "a-3"]),
        ("a-2", ["a-2", "a"]),
        ("", ["", "-2"]),
    ],
)
def test_unique_name_answers_as_kfp(name: str, collection: list[str]) -> None:
    from secureml._kfp.names import unique_name

    expected = utils.make_name_unique_by_adding_index(name, collection, "-")
    assert unique_name(name, collection, "-") == expected
