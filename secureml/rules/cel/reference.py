"""Building blocks for rule expressions: CEL text that both the API server and `cel` accept."""

from __future__ import annotations

from secureml.pods.podspec import CONTAINER_LISTS
from secureml.rules.cel.text import quote

SPEC = "object.spec"


SPEC_VAR = "spec"


def spec_bound(expression: str) -> str:
    """`expression` with `object.spec` read once and bound to `spec`: `[object.spec].all(spec, ...)`.

    Same value in both engines (a one-element list); in the Python engine every read of `object`
    costs a copy of the pod, while a comprehension variable is cheap, which makes a rule about 40%
    faster. Field selections are never identifiers, so `spec.containers` stays unambiguous.
    """
    if f"{SPEC}." not in expression:
        return expression
    body = expression.replace(f"{SPEC}.", f"{SPEC_VAR}.")
    if SPEC in body:
        raise ValueError(f"unbindable use of {SPEC} in {expression!r}")
    return f"[{SPEC}].all({SPEC_VAR}, {body})"


def spec_bound_message(message_expression: str) -> str:
    """Like `spec_bound`, for a string-valued messageExpression."""
    if f"{SPEC}." not in message_expression:
        return message_expression
    body = message_expression.replace(f"{SPEC}.", f"{SPEC_VAR}.")
    return f"[{SPEC}].map({SPEC_VAR}, {body})[0]"


def has_path(root: str, *fields: str) -> str:
    """`has()` for every step of `root.f1.f2...`, so that no step reads an absent field."""
    checks = []
    path = root
    for field in fields:
        path = f"{path}.{field}"
        checks.append(f"has({path})")
    return "(" + " && ".join(checks) + ")"


def field(root: str, *fields: str) -> str:
    return ".".join((root, *fields))


def is_true(root: str, *fields: str) -> str:
    """The field is present and `true`."""
    return f"({has_path(root, *fields)} && {field(root, *fields)} == true)"


def every_container(
    predicate: str, var: str = "c", lists: tuple[str, ...] = CONTAINER_LISTS
) -> str:
    """`predicate` (over `var`) holds for every container, init container and ephemeral container.

    `lists` is the order the lists are tested in (the first false one ends the test).
    """
    if sorted(lists) != sorted(CONTAINER_LISTS):
        raise ValueError(f"every container list, once: {lists!r}")
    parts = [
        # `containers` is required in every pod (the API server rejects a pod without it).
        f"{SPEC}.{lst}.all({var}, {predicate})"
        if lst == "containers"
        else f"(!has({SPEC}.{lst}) || {SPEC}.{lst}.all({var}, {predicate}))"
        for lst in lists
    ]
    return "(" + " && ".join(parts) + ")"


def inherited_setting(pod_sets: str, if_pod_sets: str, otherwise: str) -> tuple[str, str]:
    """Expression and message for a container setting that a pod-level setting may provide.

    `pod_sets` is read once, outside the container loops (each read of `object` costs the engine a
    copy of the pod); containers must satisfy `if_pod_sets` when it holds, `otherwise` if not.
    """
    expression = f"(({pod_sets}) ? {every_container(if_pod_sets)} : {every_container(otherwise)})"
    return expression, f"(({pod_sets}) ? (%s) : (%s))"


def offending_containers(predicate: str, var: str = "c") -> str:
    """A CEL list of the names of the containers for which `predicate` is false."""
    parts = [
        f"(has({SPEC}.{lst}) ? {SPEC}.{lst}.filter({var}, !({predicate})).map({var}, {var}.name) : [])"
        for lst in CONTAINER_LISTS
    ]
    return "(" + " + ".join(parts) + ")"


def name_first(names: str, noun: str, tail: str, otherwise: str) -> str:
    """A message naming the first offender of the CEL list `names` (and how many more).

    `otherwise` is the message (CEL string expression) when the list is empty, e.g. when only a
    pod-level field is at fault. The list is computed once and bound to `n` with the same
    one-element-list idiom as `spec_bound`.
    """
    return (
        f"[{names}].map(n, size(n) == 0 ? {otherwise} : "
        f"{quote(noun + ' ')} + '\"' + n[0] + '\"' + "
        f"(size(n) > 1 ? ' (and ' + string(size(n) - 1) + ' more)' : '') + "
        f"{quote(' ' + tail)})[0]"
    )


def container_rule_message(predicate: str, tail: str, pod_message: str | None = None) -> str:
    """messageExpression for a per-container rule: names the first offending container."""
    otherwise = quote(pod_message if pod_message is not None else f"a container {tail}")
    return name_first(offending_containers(predicate), "container", tail, otherwise)


def int_range_regex(low: int, high: int) -> str:
    """A regular expression (RE2 and Rust `regex` alike) for the decimal integers low..high.

    No leading zeros, no sign; `low` is 0 or 1. CEL cannot parse numbers out of a string with the
    functions both engines share, so a bound on a number inside an annotation is checked as a
    pattern. The pattern is kept short (one alternative for all shorter numbers, one per digit of
    `high`): both engines compile it on every `matches` call.
    """
    if low not in (0, 1) or high < max(low, 1):
        raise ValueError(f"unsupported range {low}..{high}")
    digits = str(high)
    width = len(digits)
    alternatives = ["0"] if low == 0 else []
    if width > 1:
        shorter = f"[0-9]{{0,{width - 2}}}" if width > 2 else ""
        alternatives.append(f"[1-9]{shorter}")
    for position, digit in enumerate(digits):
        smallest = 1 if position == 0 else 0
        largest = int(digit) - 1
        if largest < smallest:
            continue
        rest = width - position - 1
        span = str(smallest) if smallest == largest else f"[{smallest}-{largest}]"
        tail = f"[0-9]{{{rest}}}" if rest > 1 else ("[0-9]" if rest == 1 else "")
        alternatives.append(digits[:position] + span + tail)
    alternatives.append(digits)
    return "(?:" + "|".join(alternatives) + ")"
