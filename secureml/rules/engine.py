"""Offline evaluation of rules, failing closed, with the verdicts the API server gives.

Two engines, one verdict: docs/admission-rules.md ("The two engines") and performance.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from secureml.core.violation import Violation
from secureml.rules import verdict_memo
from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.model import Rule
from secureml.rules.request import created_by as bind_creator

if TYPE_CHECKING:
    import cel

_FIELD_NAME = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_SCALARS = (str, int, bool, float)


@functools.cache
def compiled(expression: str) -> cel.Program:
    """The plain engine's compiled program for `expression`, compiled on first use."""
    import cel

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


def _as_admitted(obj: Mapping[str, Any]) -> Any:
    """`admission_view(obj)`, without the copy when `obj` is already that: plain dicts and lists
    with no null field (what YAML and the preview give)."""
    if type(obj) is not dict:
        return admission_view(obj)
    stack: list[Any] = [obj]
    while stack:
        node = stack.pop()
        is_map = type(node) is dict
        for value in node.values() if is_map else node:
            kind = type(value)
            if kind is dict or kind is list:
                stack.append(value)
            elif (value is None and is_map) or (
                value is not None and kind not in _SCALARS and isinstance(value, Mapping)
            ):
                return admission_view(obj)
    return obj


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


# --- the fast path --------------------------------------------------------------------------------


class _Group:
    """The rules of one scope, in list order: those judged together by a `mask_program`, by
    bit, and the others (kept alone by key in `verdict_memo`, or without a program), judged one
    by one. Once the memo has seen which rules read the same on most pods (`Memo.steady`), the
    short ones among them have a mask of their own, the rest another; and the steady mask's
    value and the outcomes of the steady long rules are kept together (`held`), under what they
    all read: one key a pod for all of them instead of one each."""

    def __init__(
        self, scope: str, members: list[int], rules: tuple[Rule, ...], steady: frozenset[int]
    ) -> None:
        self.scope = scope
        self.members = tuple(members)
        chosen = [i for i in members if not verdict_memo.worth_keying(rules[i].expression)]
        parts = [[i for i in chosen if i in steady], [i for i in chosen if i not in steady]]
        self.masks: list[Any] = []
        self.kept_mask: int | None = None  # the mask whose value is held
        self.bit: dict[int, tuple[int, int]] = {}  # rule -> (its mask, its bit)
        held: list[str] = []
        for part, kept in zip(parts, (True, False), strict=True):
            part = part[: cel_cpp.MASK_WIDTH]
            program = cel_cpp.mask_program(tuple(rules[i].expression for i in part))
            if program is None:  # one of them has no fast program: the others together
                part = [i for i in part if cel_cpp.boolean_program(rules[i].expression)]
                program = cel_cpp.mask_program(tuple(rules[i].expression for i in part))
            if program is None:
                continue
            if kept:
                self.kept_mask = len(self.masks)
                held += [rules[i].expression for i in part]
            self.bit.update({index: (len(self.masks), bit) for bit, index in enumerate(part)})
            self.masks.append(program)
        # the long rules that read the same on most pods: their outcomes held with the mask's
        self.bundled = tuple(i for i in members if i in steady and i not in self.bit)
        self.bundled_at = {index: position for position, index in enumerate(self.bundled)}
        for index in self.bundled:
            held += [rules[index].expression, rules[index].message_expression]
        self.held = tuple(held) if held else None


_GROUPS: dict[tuple[Rule, ...], tuple[frozenset[int], tuple[_Group, ...]]] = {}


def _groups(rules: tuple[Rule, ...], steady: frozenset[int]) -> tuple[_Group, ...]:
    """The rules by scope (each scope once, in order of first appearance). Only the groups for
    the latest `steady` of a rule list are kept: the earlier ones' masks are no longer used."""
    kept = _GROUPS.get(rules)
    if kept is not None and kept[0] == steady:
        return kept[1]
    _GROUPS.pop(rules, None)  # its programs freed before the new ones are built
    members: dict[str, list[int]] = {}
    for index, rule in enumerate(rules):
        members.setdefault(rule.scope, []).append(index)
    groups = tuple(_Group(scope, indices, rules, steady) for scope, indices in members.items())
    _GROUPS[rules] = (steady, groups)
    return groups


class _Plain:
    """The plain engine's contexts for one pod, each built when a rule first needs it: a rule that
    falls back reads a projection to the fields it names itself (see the module docstring)."""

    def __init__(self, obj: Mapping[str, Any], old_obj: Mapping[str, Any] | None) -> None:
        self._obj, self._old = obj, old_obj
        self._contexts: dict[frozenset[str], cel.Context] = {}

    def context(self, rule: Rule) -> cel.Context:
        fields = fields_named((rule,))
        if fields not in self._contexts:
            self._contexts[fields] = _plain_context(self._obj, self._old, fields)
        return self._contexts[fields]


def evaluate(
    obj: Mapping[str, Any],
    rules: Iterable[Rule],
    old_obj: Mapping[str, Any] | None = None,
    created_by: str | None = None,
) -> list[Violation]:
    """The violations of `rules` by the pod `obj`; an empty list means the pod is allowed.

    `created_by` is the requesting user (CEL's `request.userInfo.username`), None for the
    pipeline runner the rule names (`secureml.rules.request.created_by`).

    `old_obj` is the pod before an UPDATE (CEL's `oldObject`); None, as on CREATE, makes
    `oldObject` null, exactly as the API server binds it for a CREATE request. A rule's outcome
    (and a scope's) on a pod that agrees with an earlier one on everything the rule can read is
    the earlier outcome (`secureml.rules.verdict_memo`).
    """
    rules = tuple(bind_creator(rule, created_by) for rule in rules)
    kept = verdict_memo.memo(rules)
    keyed = kept.pod(obj, old_obj)
    judge = _Judge(obj, old_obj, rules, kept, keyed)
    found: dict[int, Violation] = {}
    for group in _groups(rules, kept.grouping()):
        if group.scope and not _kept_or(
            kept.scopes[group.scope], keyed, functools.partial(judge.in_scope, group.scope)
        ):
            continue
        values: list[int | None] = [None] * len(group.masks)
        bundled: tuple[Violation | None, ...] = ()
        if group.held is not None:
            held = functools.partial(judge.held, group)
            held_value, bundled = _kept_or(kept.mask(group.held), keyed, held)
            if group.kept_mask is not None:
                values[group.kept_mask] = held_value
        for position, program in enumerate(group.masks):
            if position != group.kept_mask:
                values[position] = judge.mask(program)
        for index in group.members:
            where = group.bit.get(index)
            bits = None if where is None else values[where[0]]
            if where is not None and bits is not None:
                if bits >> where[1] & 1:
                    found[index] = judge.violation(rules[index])
                continue
            at = group.bundled_at.get(index)
            violation = bundled[at] if at is not None else judge.rule_outcome(index)
            if violation is not None:
                found[index] = violation
    return [found[index] for index in sorted(found)]


def _kept_or(
    kept: verdict_memo.Kept, pod: verdict_memo.Pod | None, outcome: Callable[[], Any]
) -> Any:
    """The outcome `kept` holds for the pod, else `outcome()`, then kept."""
    key = None if pod is None else kept.key(pod)
    found = kept.get(key)
    if found is None:
        found = outcome()
        kept.keep(key, found)
    return found


class _Judge:
    """One pod judged by the engines, with what the memo keeps for its rules (`kept`, and the
    pod to key, `keyed`: None while the memo warms up): the fast engine's binding is made at the
    first rule that needs it (none where every outcome is kept)."""

    def __init__(
        self,
        obj: Mapping[str, Any],
        old_obj: Mapping[str, Any] | None,
        rules: tuple[Rule, ...],
        kept: verdict_memo.Memo,
        keyed: verdict_memo.Pod | None,
    ) -> None:
        self._obj, self._old, self._rules = obj, old_obj, rules
        self._kept, self._keyed = kept, keyed
        self._bound: Any = None
        self.plain = _Plain(obj, old_obj)

    @property
    def bound(self) -> Any:
        if self._bound is None:
            old = None if self._old is None else _fast_view(self._old, self._rules)
            self._bound = cel_cpp.activation(_fast_view(self._obj, self._rules), old)
        return self._bound

    def in_scope(self, scope: str) -> bool:
        return _in_scope_fast(scope, self.bound, self.plain)

    def mask(self, program: Any) -> int | None:
        """A `mask_program`'s value: the bits of its rules that are false; None for an error."""
        value = program.eval(self.bound)
        return value.value() if value.type() == cel_cpp.INT else None

    def violation(self, rule: Rule) -> Violation:
        """The violation of a rule the fast engine found false, with its message."""
        return Violation(rule.id, _message_fast(rule, self.bound, self.plain))

    def held(self, group: _Group) -> tuple[int | None, tuple[Violation | None, ...]]:
        """What a group holds for the pod: its steady mask's value and its steady long rules'
        violations (None: allowed)."""
        value = None if group.kept_mask is None else self.mask(group.masks[group.kept_mask])
        return value, tuple(self.rule_outcome(index) for index in group.bundled)

    def rule_outcome(self, index: int) -> Violation | None:
        """The violation of one rule judged alone (None: allowed), its verdict and violation
        kept."""
        rule, kept, keyed = self._rules[index], self._kept, self._keyed
        verdicts = kept.verdicts[index]
        verdict_key = None if keyed is None else verdicts.key(keyed)
        if verdicts.get(verdict_key) is True:
            return None
        outcome = functools.partial(self.outcome, rule, cel_cpp.boolean_program(rule.expression))
        violation: Violation | None = _kept_or(kept.violations[index], keyed, outcome)[0]
        verdicts.keep(verdict_key, violation is None)
        return violation

    def outcome(self, rule: Rule, program: Any | None) -> tuple[Violation | None]:
        """`rule(...)` as an outcome to keep (None is kept as `(None,)`: allowed)."""
        return (self.rule(rule, program),)

    def rule(self, rule: Rule, program: Any | None) -> Violation | None:
        if program is not None:
            verdict = program.eval(self.bound).value()
            if verdict is True:
                return None
            if verdict is False:
                return self.violation(rule)
        return _judge(rule, self.plain.context(rule))  # an error, a non-boolean, no fast program


def _fast_view(obj: Mapping[str, Any], rules: tuple[Rule, ...]) -> Any:
    """What the fast engine is handed: `admission_view(obj)`, and where the rules name no
    container's environment, only the fields they name at the levels `projection` cuts (values
    not copied). The engine converts the whole object it is handed at its first access (about
    0.3 ms for a KFP step pod); Pod Security's rules name a fraction of a pod (no env, command,
    args or mounts), and a rule cannot read a field its text does not name (the plain path's
    projection rests on the same). The tenant rules name nearly every field: no cut there."""
    view = _as_admitted(obj)
    fields = fields_named(rules)
    if "env" in fields or type(view) is not dict:
        return view
    return _cut(view, fields)


def _cut(pod: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """`pod` (already an admission view) with only `fields` kept at the pod, metadata, spec,
    container and volume levels; what is kept is shared with `pod`, not copied."""

    def keep(node: Any) -> Any:
        if type(node) is not dict:
            return node
        return {key: value for key, value in node.items() if key in fields}

    view: dict[str, Any] = keep(pod)
    for level in ("metadata", "spec"):
        if level in view:
            view[level] = keep(view[level])
    spec = view.get("spec")
    if type(spec) is dict:
        for list_name in (*_CONTAINER_LISTS, "volumes"):
            entries = spec.get(list_name)
            if type(entries) is list:
                spec[list_name] = [keep(entry) for entry in entries]
    return view


def _in_scope_fast(scope: str, bound: Any, plain: _Plain) -> bool:
    program = cel_cpp.boolean_program(scope)
    verdict = None if program is None else program.eval(bound).value()
    if verdict is True or verdict is False:
        return verdict
    return _in_scope(scope, plain.context(_scope_rule(scope)))


@functools.cache
def _scope_rule(scope: str) -> Rule:
    """A rule naming exactly the fields of `scope` (for its plain context)."""
    return Rule("", "", "true", "''", (), scope)


def _message_fast(rule: Rule, bound: Any, plain: _Plain) -> str:
    program = cel_cpp.program(rule.message_expression)
    value = None if program is None else program.eval(bound)
    if value is None or value.type() == cel_cpp.ERROR:
        return _message(rule, plain.context(rule))
    kind = value.type()
    text = value.value()
    return text if kind == cel_cpp.STRING and text else rule.message


# --- the plain path -------------------------------------------------------------------------------


def evaluate_plain(
    obj: Mapping[str, Any], rules: Iterable[Rule], old_obj: Mapping[str, Any] | None = None
) -> list[Violation]:
    """`evaluate` by the plain engine alone: the reference the fast path is tested against."""
    rules = tuple(rules)
    context = _plain_context(obj, old_obj, fields_named(rules))
    in_force = {"": True}
    violations: list[Violation] = []
    for rule in rules:
        if rule.scope not in in_force:
            in_force[rule.scope] = _in_scope(rule.scope, context)
        if not in_force[rule.scope]:
            continue
        found = _judge(rule, context)
        if found is not None:
            violations.append(found)
    return violations


def _plain_context(
    obj: Mapping[str, Any], old_obj: Mapping[str, Any] | None, fields: frozenset[str]
) -> cel.Context:
    import cel

    old = None if old_obj is None else projection(old_obj, fields)
    return cel.Context({"object": projection(obj, fields), "oldObject": old})


def _judge(rule: Rule, context: cel.Context) -> Violation | None:
    """The plain engine's violation of `rule`, None when the rule holds."""
    try:
        verdict = compiled(rule.expression).execute(context)
    except Exception as err:  # noqa: BLE001 - the CEL engine raises several types; any of them denies
        return Violation(rule.id, f"{rule.message} (rule could not be evaluated: {err})")
    if verdict is True:
        return None
    if verdict is not False:
        return Violation(rule.id, f"{rule.message} (rule returned {verdict!r}, not a boolean)")
    return Violation(rule.id, _message(rule, context))


def in_scope(obj: Mapping[str, Any], scope: str) -> bool:
    """Whether rules of `scope` are in force for the pod `obj` (see `_in_scope`)."""
    if not scope:
        return True
    return _in_scope_fast(scope, cel_cpp.activation(_as_admitted(obj), None), _Plain(obj, None))


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
