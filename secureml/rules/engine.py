"""Offline evaluation of rules through the real CEL engine (`common-expression-language`).

Each expression is compiled once per process and cached. The pod is given to CEL the way the API
server gives it to a ValidatingAdmissionPolicy: as `object`, with fields that are null left out
(the API server drops them when it decodes the pod). A rule that cannot be evaluated, or whose
expression is not a boolean, denies the pod, as a policy with `failurePolicy: Fail` does. A rule
whose `scope` (its policy's matchCondition) is false for the pod is not in force and is skipped;
each distinct scope is evaluated once per pod.

Speed: the engine copies the value of `object` on every access, so its cost grows with the size
of the pod (KFP inlines a lightweight component's whole source in `args`). `evaluate` therefore
hands CEL a projection: at the pod, metadata, spec, container and volume levels it keeps only the
fields that some rule of the list names in its text. A rule cannot read a field its text does not
name, so no verdict or message changes; deeper levels (maps of labels, limits, ...) are kept whole.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

import cel

from secureml.rules.model import Rule, Violation

_FIELD_NAME = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


@functools.cache
def compiled(expression: str) -> cel.Program:
    """The compiled program for `expression`, compiled on first use."""
    return cel.compile(expression)


def admission_view(obj: Any) -> Any:
    """`obj` without null fields, as the API server hands a decoded object to CEL."""
    kind = type(obj)
    if kind is dict or (kind is not list and isinstance(obj, Mapping)):
        return {key: _view(value) for key, value in obj.items() if value is not None}
    if kind is list:
        return [_view(item) for item in obj]
    return obj


def _view(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float:
        return value
    return admission_view(value)


@functools.cache
def fields_named(rules: tuple[Rule, ...]) -> frozenset[str]:
    """Every field name the rules' expressions and message expressions select."""
    names: set[str] = set()
    for rule in rules:
        names.update(_FIELD_NAME.findall(rule.expression))
        names.update(_FIELD_NAME.findall(rule.message_expression))
        names.update(_FIELD_NAME.findall(rule.scope))
    return frozenset(names)


def projection(pod: Mapping[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """`admission_view(pod)` keeping, at the structured levels, only the named `fields`."""

    def keep(node: Any) -> Any:  # a mapping's kept fields; anything else as it is
        if not isinstance(node, Mapping):
            return node
        return {k: _view(v) for k, v in node.items() if v is not None and k in fields}

    view: dict[str, Any] = keep(pod)
    for level in ("metadata", "spec"):
        if level in view:
            view[level] = keep(pod[level])
    spec = view.get("spec")
    if isinstance(spec, dict):
        for list_name in (*_CONTAINER_LISTS, "volumes"):
            entries = spec.get(list_name)
            if isinstance(entries, list):
                spec[list_name] = [
                    keep(entry) for entry in pod["spec"][list_name] if entry is not None
                ]
    return view


def evaluate(
    obj: Mapping[str, Any], rules: Iterable[Rule], old_obj: Mapping[str, Any] | None = None
) -> list[Violation]:
    """The violations of `rules` by the pod `obj`; an empty list means the pod is allowed.

    `old_obj` is the pod before an UPDATE (CEL's `oldObject`); None, as on CREATE, makes
    `oldObject` null, exactly as the API server binds it for a CREATE request.
    """
    rules = tuple(rules)
    fields = fields_named(rules)
    old = None if old_obj is None else projection(old_obj, fields)
    context = cel.Context({"object": projection(obj, fields), "oldObject": old})
    in_force = {"": True}  # by scope; each scope is evaluated once per pod
    violations: list[Violation] = []
    for rule in rules:
        if rule.scope not in in_force:
            in_force[rule.scope] = _in_scope(rule.scope, context)
        if not in_force[rule.scope]:
            continue
        try:
            verdict = compiled(rule.expression).execute(context)
        except Exception as err:  # noqa: BLE001 - the CEL engine raises several types; any of them denies
            violations.append(
                Violation(rule.id, f"{rule.message} (rule could not be evaluated: {err})")
            )
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


def in_scope(obj: Mapping[str, Any], scope: str) -> bool:
    """Whether rules of `scope` are in force for the pod `obj` (see `_in_scope`)."""
    if not scope:
        return True
    fields = fields_named((Rule("", "", "true", "''", (), scope),))
    return _in_scope(scope, cel.Context({"object": projection(obj, fields), "oldObject": None}))


def _in_scope(scope: str, context: cel.Context) -> bool:
    """A scope that is not exactly false keeps its rules in force: an error or a non-boolean fails
    closed (the API server rejects the request when a matchCondition errors, failurePolicy Fail)."""
    try:
        return compiled(scope).execute(context) is not False
    except Exception:  # noqa: BLE001 - the CEL engine raises several types; any of them keeps the rules in force
        return True


def _message(rule: Rule, context: cel.Context) -> str:
    try:
        text = compiled(rule.message_expression).execute(context)
    except Exception:  # noqa: BLE001 - a message that cannot be evaluated falls back to the static one; the verdict stands
        return rule.message
    return text if isinstance(text, str) and text else rule.message
