"""The fast engine's programs are type-checked, then planned from the parsed tree alone
(`cel_cpp._planned`): every rule of every example profile and Pod Security level computes, on
every corpus pod and previewed pod, exactly what its type-checked program computes; a text the
checker refuses still has no program; and the tree it is planned from is the parsed one, without
its source info."""

from __future__ import annotations

from typing import Any

import pytest

from secureml.pods.preview import preview_pods
from secureml.rules import rules_for_level, rules_for_profile
from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.cel import syntax as cel_ast
from secureml.rules.cel.cache import ENVIRONMENTS
from secureml.rules.engine import _as_admitted
from tests.rules.test_engine import _pods
from tests.support.paths import fixture_dir
from tests.support.profiles import EXAMPLE_PROFILES, example_profile, reference_documents


def _texts(rules: Any) -> set[str]:
    """The texts the engine compiles for `rules`: each rule's (as `boolean_program` runs it), its
    message's and its scope's."""
    texts: set[str] = set()
    for rule in rules:
        texts.update(
            t for t in (cel_cpp._boolean_text(rule.expression), rule.message_expression) if t
        )
        if rule.scope:
            texts.add(rule.scope)
    return texts


def _checked_program(text: str) -> Any:
    """The program as the type checker's output plans it, in the first environment taking it."""
    for environment in ENVIRONMENTS:
        try:
            return cel_cpp._env(environment).compile(text)
        except Exception:  # noqa: BLE001 - the binding raises RuntimeError/ValueError
            continue
    return None


def _outcome(program: Any, bound: Any) -> tuple[Any, Any]:
    value = program.eval(bound)
    return value.type().name(), value.value()


def _programs(texts: set[str]) -> list[tuple[str, Any, Any]]:
    """(text, planned program, checked program) for each text the checker takes."""
    pairs = []
    for text in sorted(texts):
        planned, checked = cel_cpp.program(text), _checked_program(text)
        assert (planned is None) == (checked is None), text  # taken by the checker, or not at all
        if checked is not None:
            pairs.append((text, planned, checked))
    return pairs


def _compare(pods: list[dict[str, Any]], pairs: list[tuple[str, Any, Any]]) -> None:
    for pod in pods:
        bound = cel_cpp.activation(pod, None)
        for text, planned, checked in pairs:
            assert _outcome(planned, bound) == _outcome(checked, bound), (text, pod["metadata"])


def test_pod_security_programs_compute_what_checked_ones_do() -> None:
    """Pod Security's rules on every corpus pod, Kyverno's suite too."""
    fixture_dir("kyverno-pod-security", "pod-security")  # the corpus, or a skip that says so
    texts = set().union(*(_texts(rules_for_level(level)) for level in ("baseline", "restricted")))
    pods = [_as_admitted(pod) for pod in _pods(kyverno=True)]
    assert len(pods) > 500
    _compare(pods, _programs(texts))


def test_profile_programs_compute_what_checked_ones_do() -> None:
    """Each example profile's rules on the attack, allowed and previewed pods."""
    pods = [_as_admitted(pod) for pod in _pods(kyverno=False)]
    texts: set[str] = set()
    for name in EXAMPLE_PROFILES:
        profile = example_profile(name)
        texts |= _texts(rules_for_profile(profile))
        for documents in reference_documents(profile):
            pods += list(preview_pods(documents, profile).values())
    pairs = _programs(texts)
    assert len(pairs) > 100 and len(pods) > 100
    _compare(pods, pairs)


def test_a_text_the_checker_refuses_has_no_program() -> None:
    # CEL's runtime compares an int with a double; the checker, like the API server's, refuses it
    assert cel_cpp._env().compile("1 == 1.0", disable_check=True) is not None
    assert cel_cpp.program("1 == 1.0") is None
    # the strings extension's functions are taken where the checker knows them
    assert cel_cpp.program("'A'.lowerAscii() == 'a'") is not None


def test_programs_are_planned_from_the_parsed_tree_without_source_info() -> None:
    text = "object.spec.containers.all(c, has(c.securityContext) && c.name.startsWith('a'))"
    parsed = cel_cpp._env().compile(text, disable_check=True).serialize()
    stripped = cel_ast.without_source_info(parsed)
    assert len(stripped) < len(parsed)
    assert cel_cpp.program(text).serialize() == stripped  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="ParsedExpr"):
        cel_ast.without_source_info(cel_cpp.checked(text) or b"")
    with pytest.raises(ValueError):
        cel_ast.without_source_info(parsed[:-3])
