"""What `secureml.rules.cel.reads` finds an expression can read, on the C++ engine's own syntax tree.

Each case names the parts of `object` a CEL expression reads; the analysis must find at least
those (reading more is safe, reading less would let `verdict_memo` reuse an outcome wrongly),
and where the case says a part is read only in part, no more than that: otherwise the memo would
never find two step pods alike.
"""

from __future__ import annotations

import json

import pytest

from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.cel import syntax as cel_ast
from secureml.rules.cel.reads import Read, reads


def _tree(expression: str) -> cel_ast.Node:
    checked = cel_cpp.checked(expression)
    assert checked is not None, expression
    return cel_ast.parse(checked)


def _object(expression: str) -> Read:
    found = reads(_tree(expression))
    assert found is not None, expression
    return found["object"]


def _at(read: Read, *path: str) -> Read:
    for step in path:
        read = read.each if step == "[*]" else read.fields[step]  # type: ignore[assignment]
        assert read is not None
    return read


def test_the_tree_is_the_engines_after_macros() -> None:
    tree = _tree("has(object.a) && object.b.all(c, c.x == 'q') && [1.5, -2, null, b'z'][0] != 1")
    assert isinstance(tree, cel_ast.Call) and tree.function == "_&&_"
    text = repr(tree)
    assert "Select(operand=Ident(name='object'), field='a', test_only=True)" in text
    assert "Comprehension(iter_var='c'" in text
    for constant in ("Const(value=1.5)", "Const(value=-2)", "Const(value=None)", "b'z'"):
        assert constant in text


def test_a_cut_short_program_is_refused() -> None:
    serialized = cel_cpp.checked("object.a == 1")
    assert serialized is not None
    with pytest.raises(ValueError):
        cel_ast.parse(serialized[:-3])


def test_a_compared_field_is_read_whole_and_its_parents_only_there() -> None:
    read = _object("object.spec.hostNetwork == true")
    assert _at(read, "spec", "hostNetwork").whole
    assert not read.whole and not _at(read, "spec").whole
    assert list(_at(read, "spec").fields) == ["hostNetwork"]


def test_has_reads_only_whether_the_field_is_there() -> None:
    field = _at(_object("has(object.spec.hostPID)"), "spec", "hostPID")
    assert not (field.whole or field.size or field.fields or field.each)


def test_a_constant_key_reads_that_key_and_a_computed_key_the_whole_map() -> None:
    labels = _at(_object("object.metadata.labels['a'] == 'b'"), "metadata", "labels")
    assert not labels.whole and _at(labels, "a").whole
    labels = _at(_object("'a' in object.metadata.labels"), "metadata", "labels")
    assert not labels.whole and "a" in labels.fields
    read = _object("object.metadata.labels[object.spec.key] == 'b'")
    assert _at(read, "metadata", "labels").whole and _at(read, "spec", "key").whole
    # a key built from constants is not a constant key: `'a' + 'b'` looks up 'ab'
    assert _at(_object("object.metadata.labels['a' + 'b'] == 'x'"), "metadata", "labels").whole


def test_keys_from_a_constant_list_are_constant_keys() -> None:
    labels = _at(
        _object(
            "['a', 'b'].all(l, l in object.metadata.labels && object.metadata.labels[l] != '')"
        ),
        "metadata",
        "labels",
    )
    assert not labels.whole and set(labels.fields) == {"a", "b"}


def test_iterating_reads_each_element_as_the_body_does() -> None:
    read = _object("object.spec.containers.all(c, c.image.startsWith('x') && has(c.ports))")
    element = _at(read, "spec", "containers", "[*]")
    assert _at(element, "image").whole and not element.whole
    assert not _at(element, "ports").whole


def test_iterating_a_map_reads_its_keys() -> None:
    labels = _at(_object("object.metadata.labels.all(k, k.startsWith('x'))"), "metadata", "labels")
    assert labels.each is not None and labels.each.whole and not labels.whole


def test_size_of_a_filter_reads_the_filter_not_the_elements() -> None:
    read = _object("size(object.spec.containers.filter(c, c.name == 'a')) == 1")
    containers = _at(read, "spec", "containers")
    assert not containers.whole and containers.each is not None and not containers.each.whole
    assert _at(containers, "[*]", "name").whole
    assert _at(_object("size(object.spec.volumes) > 1"), "spec", "volumes").size


def test_an_element_of_a_mapped_list_compared_reads_what_was_mapped() -> None:
    read = _object("object.spec.containers.map(c, c.name)[0] == 'a'")
    assert _at(read, "spec", "containers", "[*]", "name").whole
    assert not _at(read, "spec", "containers", "[*]").whole


def test_a_constant_number_index_reads_elements_and_marks_the_index() -> None:
    containers = _at(_object("object.spec.containers[0].name == 'a'"), "spec", "containers")
    assert containers.index and _at(containers, "[*]", "name").whole


def test_values_through_ternaries_concatenation_and_literals() -> None:
    read = _object("(object.spec.x ? object.a : object.b).c == 1")
    assert _at(read, "spec", "x").whole and _at(read, "a", "c").whole and _at(read, "b", "c").whole
    read = _object("object.a + object.b == 'z'")
    assert _at(read, "a").whole and _at(read, "b").whole
    assert _at(_object("{'k': object.a}['k'] == 1"), "a").whole
    assert _at(_object("[object.spec].all(s, s.x == 1)"), "spec", "x").whole


def test_old_object_is_its_own_root() -> None:
    found = reads(_tree("oldObject == null || oldObject.metadata.name == object.metadata.name"))
    assert found is not None
    assert found["oldObject"].whole and _at(found["object"], "metadata", "name").whole


def test_what_the_analysis_does_not_model_is_not_analysed() -> None:
    """An identifier of a type, for one: the rule is then evaluated on every pod."""
    assert reads(_tree("type(object.a) == int")) is None


def test_a_read_kept_as_json_is_the_same_read() -> None:
    """`verdict_memo` keeps each rule's analysis on disk as JSON: every example profile's rules
    and messages read back exactly (the same shape); what is not a read is refused."""
    from secureml.rules import rules_for_profile
    from tests.support.profiles import EXAMPLE_PROFILES, example_profile

    checked = 0
    for name in EXAMPLE_PROFILES:
        for rule in rules_for_profile(example_profile(name)):
            for expression in (rule.expression, rule.message_expression):
                found = reads(_tree(expression))
                if found is None:
                    continue
                for read in found.values():
                    again = Read.from_json(json.loads(json.dumps(read.to_json())))
                    assert again.shape() == read.shape()
                checked += 1
    assert checked > 100
    for broken in ([1, 0, None], "whole", [0, 0, None, []]):
        with pytest.raises(ValueError):
            Read.from_json(broken)
