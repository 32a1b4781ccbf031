"""Offline evaluation of rules through the real CEL engine (`common-expression-language`).

Each expression is compiled once per process and cached. The pod is given to CEL the way the API
server gives it to a ValidatingAdmissionPolicy: as `object`, with fields that are null left out
(the API server drops them when it decodes the pod). A rule that cannot be evaluated, or whose
expression is not a boolean, denies the pod, as a policy with `failurePolicy: Fail` does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import cel

from secureml.rules.model import Rule, Violation


@functools.cache
def compiled(expression: str) -> cel.Program:
    """The compiled program for `expression`, compiled on first use."""
    return cel.compile(expression)


def admission_view(obj: Any) -> Any:
    """`obj` without null fields, as the API server hands a decoded object to CEL."""
    if isinstance(obj, Mapping):
        return {key: admission_view(value) for key, value in obj.items() if value is not None}
    if isinstance(obj, list):
        return [admission_view(item) for item in obj]
    return obj


def evaluate(obj: Mapping[str, Any], rules: Iterable[Rule]) -> list[Violation]:
    """The violations of `rules` by the pod `obj`; an empty list means the pod is allowed."""
    context = cel.Context({"object": admission_view(obj)})
    violations: list[Violation] = []
    for rule in rules:
        try:
            verdict = compiled(rule.expression).execute(context)
        except Exception as err:  # the engine raises several types; any of them denies
            violations.append(Violation(rule.id, f"{rule.message} (rule could not be evaluated: {err})"))
            continue
        if verdict is True:
            continue
        if verdict is not False:
            violations.append(
                Violation(rule.id, f"{rule.message} (rule returned {verdict!r}, not a boolean)")
            )
            continue
        violations.append(Violation(rule.id, _message(rule, context)))
    return violations


def _message(rule: Rule, context: cel.Context) -> str:
    try:
        text = compiled(rule.message_expression).execute(context)
    except Exception:
        return rule.message
    return text if isinstance(text, str) and text else rule.message
