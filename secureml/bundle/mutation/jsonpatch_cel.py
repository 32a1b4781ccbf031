"""The mutations compiled to the MutatingAdmissionPolicy's JSONPatch CEL expression."""

from __future__ import annotations

import re
from typing import Any

from secureml.core import contract
from secureml.pods.mutation.catalogue import mutations_for_profile
from secureml.pods.mutation.groups import Group, group_operations
from secureml.pods.mutation.model import FromLabel, LabelIs
from secureml.pods.podspec import CREATED_CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules.cel.text import LABELS, label_in, label_present, quote

# Every pod has these; operations below them never need to create them.
ALWAYS_PRESENT = ("metadata", "spec")


def label_test(condition: LabelIs) -> str:
    """CEL for `condition` over the submitted pod."""
    if not condition.values:
        return label_present(condition.key)
    return label_in(condition.key, condition.values)


def _pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# Pod fields whose values are string maps (the key is data, not a field name), by their last two
# schema path elements. Every other object is built with its schema type (`_cel_object`).
_STRING_MAPS = frozenset(
    {("metadata", "annotations"), ("metadata", "labels"), ("spec", "nodeSelector")}
)
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A schema path: the field names from the pod's root down to a value, list items transparent
# (("spec", "volumes", "csi") is the `csi` of any volume). Kubernetes names the CEL type of the
# object there `Object.spec.volumes.csi`.
SchemaPath = tuple[str, ...]


def _is_string_map(at: SchemaPath) -> bool:
    return at[-2:] in _STRING_MAPS


def _cel_object(at: SchemaPath, fields: list[tuple[str, str]]) -> str:
    """A value of the object type at `at`, or a string map there.

    The API server's CEL environment requires homogeneous aggregate literals: a map literal of
    mixed value types (`{"name": "x", "readOnly": true}`) is refused when the policy is created.
    Typed object construction (`Object.spec.volumes{name: "x", csi: ...}`) is what it accepts.
    """
    if _is_string_map(at):
        return "{" + ", ".join(f"{quote(key)}: {value}" for key, value in fields) + "}"
    for key, _ in fields:
        if not _FIELD_NAME.fullmatch(key):
            raise ValueError(f"{key!r} under {'.'.join(at)} is no field name (a string map?)")
    body = ", ".join(f"{key}: {value}" for key, value in fields)
    return f"Object.{'.'.join(at)}{{{body}}}"


def _cel_value(value: Any, at: SchemaPath) -> str:
    """`value`, to be written at schema path `at`, as a CEL expression the API server accepts."""
    if isinstance(value, FromLabel):
        return f"{LABELS}[{quote(value.key)}]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return "[" + ", ".join(_cel_value(item, at) for item in value) + "]"
    if isinstance(value, dict):
        return _cel_object(at, [(key, _cel_value(item, (*at, key))) for key, item in value.items()])
    raise TypeError(f"no CEL literal for {value!r}")


def _nest(parent: SchemaPath, path: tuple[str, ...], value_cel: str) -> str:
    """The object to add at path[0] (under `parent`) when it is missing: path[1:] nested down to
    the value."""
    if len(path) == 1:
        return value_cel
    here = (*parent, path[0])
    return _cel_object(here, [(path[1], _nest(here, path[1:], value_cel))])


def _pointer_cel(parts: tuple[str, ...]) -> str:
    """A JSON pointer as CEL: literal segments merged, `string(...)` index expressions kept."""
    pieces: list[str] = []
    literal = ""
    for part in parts:
        if part.startswith("string("):
            if literal:
                pieces.append(quote(literal))
                literal = ""
            pieces.append(part)
        else:
            literal += part
    if literal:
        pieces.append(quote(literal))
    return " + ".join(pieces)


def _patch(pointer: tuple[str, ...], value_cel: str) -> str:
    return f"JSONPatch{{op: 'add', path: {_pointer_cel(pointer)}, value: {value_cel}}}"


def _ensure(
    var: str, at: SchemaPath, pointer: tuple[str, ...], path: tuple[str, ...], value_cel: str
) -> str:
    """One JSONPatch that sets `value_cel` at `path` under `var` (schema path `at`), creating
    missing parents."""
    head = path[0]
    here = (*pointer, "/" + _pointer(head))
    if len(path) == 1:
        return _patch(here, value_cel)
    deeper = _ensure(f"{var}.{head}", (*at, head), here, path[1:], value_cel)
    if var == "object" and head in ALWAYS_PRESENT:
        return deeper
    created = _patch(here, _nest(at, path, value_cel))
    return f"(has({var}.{head}) ? {deeper} : {created})"


def _appends(
    var: str, at: SchemaPath, pointer: tuple[str, ...], group: Group
) -> list[tuple[str | None, str]]:
    """(condition or None, JSONPatch) pairs that add `group`'s items at its path under `var`.

    Every item is its own `add .../-` (append) or `add .../N` (prepend: the first item at index 0,
    the next at 1, ..., so they keep their order before the list's own), after patches that create
    the missing parents (typed empty objects) and the missing list (`[]`). A list literal of typed objects as a patch value
    (`value: [Object.spec.resourceClaims{...}]`, also `[] + [...]`) panics kube-apiserver 1.36.3
    (cel-go's list ConvertToNative: "*structpb.Struct is not assignable to *structpb.Value"), and
    the request gets no answer; single typed objects and `[]` are converted fine.
    """
    steps: list[tuple[str | None, str]] = []
    here = pointer
    present: list[str] = []
    field_path = var
    for depth, name in enumerate(group.path):
        here = (*here, "/" + _pointer(name))
        field_path = f"{field_path}.{name}"
        present.append(f"has({field_path})")
        if var == "object" and depth == 0 and name in ALWAYS_PRESENT:
            continue
        last = depth == len(group.path) - 1
        empty = "[]" if last else _cel_object((*at, *group.path[: depth + 1]), [])
        steps.append((f"!({' && '.join(present)})", _patch(here, empty)))
    single = len(group.parts) == 1  # its condition already guards the whole group
    if group.kind == "prepend" and not single:
        # Indexes would depend on which conditional parts apply; one part needs none.
        raise ValueError(f"a conditional prepend at {group.path} is not supported")
    index = 0
    for when, items in group.parts:
        condition = None if when is None or single else label_test(when)
        for item in items:
            value = _cel_value(item, (*at, *group.path))
            position = f"/{index}" if group.kind == "prepend" else "/-"
            steps.append((condition, _patch((*here, position), value)))
            index += 1
    return steps


def _condition(parts: tuple[tuple[LabelIs | None, Any], ...]) -> str | None:
    """CEL for "any part applies"; None when one always does."""
    if any(when is None for when, _ in parts):
        return None
    return " || ".join(f"({label_test(when)})" for when, _ in parts if when is not None)


def _group_cel(group: Group) -> str:
    """CEL for a list of JSONPatch operations implementing `group`."""
    if group.target == "pod":
        if group.kind == "set":
            value = _cel_value(group.parts[0][1], group.path)
            body = "[" + _ensure("object", (), (), group.path, value) + "]"
        else:
            body = " + ".join(
                f"[{patch}]" if when is None else f"({when} ? [{patch}] : [])"
                for when, patch in _appends("object", (), (), group)
            )
    else:
        lists = []
        fields = ("containers",) if group.target == "main" else CREATED_CONTAINER_LISTS
        for field_name in fields:
            source = f"object.spec.{field_name}"
            container: SchemaPath = ("spec", field_name)
            pointer = (f"/spec/{field_name}/", f"string({source}.indexOf(c))")
            chosen = source
            if group.target == "main":
                chosen = f"{source}.filter(c, c.name == {quote(contract.KFP_MAIN_CONTAINER)})"
            if group.kind == "set":
                value = _cel_value(group.parts[0][1], (*container, *group.path))
                steps: list[tuple[str | None, str]] = [
                    (None, _ensure("c", container, pointer, group.path, value))
                ]
            else:
                steps = _appends("c", container, pointer, group)
            mapped = " + ".join(
                f"{chosen}.map(c, {patch})"
                if when is None
                else f"{chosen}.filter(c, {when}).map(c, {patch})"
                for when, patch in steps
            )
            if field_name != "containers":  # the only list every pod has
                mapped = f"(has({source}) ? {mapped} : [])"
            lists.append(mapped)
        body = " + ".join(lists)
    condition = _condition(group.parts)
    return body if condition is None else f"(({condition}) ? {body} : [])"


def jsonpatch_expression(profile: TenantProfile) -> str:
    """The JSONPatch CEL expression of the tenant's MutatingAdmissionPolicy ("" when none)."""
    groups = group_operations(mutations_for_profile(profile))
    return "\n+ ".join(_group_cel(group) for group in groups)
