"""Issue 34, point 9: the bundle's CEL laid out over lines, with nothing but whitespace changed."""

from __future__ import annotations

import pytest
import yaml

from secureml.bundle import BundleOptions, cel_layout, render_bundle
from secureml.bundle.cel_layout import SERVER_LIMIT, WIDTH, CelLayoutError, fold, tokens
from secureml.rules import rules_for_profile
from tests.bundle.conftest import load


def _texts(expression: str) -> list[str]:
    return [token.text for token in tokens(expression)]


@pytest.mark.parametrize("tenant", ["team-a", "team-conf", "team-dra", "team-restricted"])
def test_every_rule_folds_to_its_own_tokens(tenant: str) -> None:
    for rule in rules_for_profile(load(tenant)):
        for expression in (rule.expression, rule.message_expression):
            folded = fold(expression)
            assert _texts(folded) == _texts(expression), rule.id
            assert fold(folded) == folded, rule.id  # a second render changes nothing


def test_the_rendered_policies_have_short_lines() -> None:
    """The ValidatingAdmissionPolicy had lines of 17,000 characters; now a line is longer than
    WIDTH only where one token or an unbreakable run is (a long literal), never by thousands."""
    text = render_bundle(load("team-a"), BundleOptions())["validatingadmissionpolicy.yaml"]
    lengths = sorted(len(line) for line in text.splitlines())
    for line in text.splitlines():
        if len(line) >= 600:  # only one long literal (the ARGO_TEMPLATE keys' pattern) makes it
            longest = max((len(token.text) for token in tokens(line.strip())), default=0)
            assert len(line) - longest < WIDTH + 80, line[:200]
    # past the indentation of nested macros: only messages and long literals are wider
    over = [line for line in text.splitlines() if len(line.strip()) > WIDTH + 40]
    assert len(over) < len(lengths) / 100
    assert "expression: |" in text  # block scalars: one CEL line per YAML line


@pytest.mark.parametrize(
    ("expression", "folded"),
    [
        ("a && b", "a && b"),
        (
            "object.spec.containers.all(c, "
            + " && ".join(f"c.name != 'n{i:02}'" for i in range(8))
            + ")",
            "object.spec.containers.all(c,\n"
            + "\n".join(("  " if i == 0 else "  && ") + f"c.name != 'n{i:02}'" for i in range(8))
            + "\n)",
        ),
    ],
)
def test_fold_breaks_at_structure(expression: str, folded: str) -> None:
    assert fold(expression) == folded


def test_string_literals_are_never_split() -> None:
    """Commas, operators, brackets and quotes inside literals (quoted, raw, triple-quoted, bytes)
    are part of the literal: the folded text keeps each literal whole."""
    literals = [
        "'a && b, (c'",
        '"x || y ) ]"',
        "r'\\d+, \\)'",
        "'''one, two\n(three'''",
        "b'\\x00,'",
    ]
    expression = " || ".join(f"object.metadata.name == {lit}" for lit in literals) * 1
    expression = f"[{expression}, {expression}].all(x, x)"
    folded = fold(expression)
    assert _texts(folded) == _texts(expression)
    for literal in literals:
        assert literal in folded


def test_a_comment_leaves_the_expression_as_written() -> None:
    expression = "a // why\n && " + " && ".join(f"b{i}" for i in range(40))
    assert fold(expression) == expression


def test_unbalanced_brackets_are_refused() -> None:
    with pytest.raises(CelLayoutError):
        fold("f(" + "x, " * 50)


@pytest.mark.parametrize("tenant", ["team-a", "team-conf", "team-dra", "team-restricted"])
def test_folded_expressions_fit_the_api_server(tenant: str) -> None:
    """Kubernetes refuses a CEL expression over 100,000 code points; folding must never be what
    passes it (team-dra's system-container rule did at full indentation: 115,214)."""
    policy = render_bundle(load(tenant), BundleOptions())["validatingadmissionpolicy.yaml"]
    for document in yaml.safe_load_all(policy):
        for validation in document["spec"].get("validations", []):
            for key in ("expression", "messageExpression"):
                text = validation.get(key, "")
                assert len(text) <= SERVER_LIMIT, (tenant, validation["message"][:60], key)


def test_deep_nesting_shares_one_column_when_the_text_would_be_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nested = "a"
    for depth in range(60):
        nested = f"f{depth}(x, {nested}, 'padding padding padding padding padding padding')"
    full = fold(nested)
    assert max(_indents(full)) > 40  # at full depth: one level, two columns
    monkeypatch.setattr(cel_layout, "SERVER_LIMIT", len(full) - 1)  # a server that refuses it
    shared = fold(nested)
    assert _texts(shared) == _texts(nested)
    assert len(shared) < len(full)
    assert max(_indents(shared)) <= 40
    monkeypatch.setattr(cel_layout, "SERVER_LIMIT", len(nested) - 1)  # not even flat: as written
    assert fold(nested) == nested


def _indents(text: str) -> list[int]:
    return [len(line) - len(line.lstrip(" ")) for line in text.splitlines()]
