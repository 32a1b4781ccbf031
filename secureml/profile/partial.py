"""The parts of an invalid profile that did parse, so cross-field checks can still run on them."""

from __future__ import annotations

import copy
import difflib
import types
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

_CUTOFF = 0.6  # difflib's default: catches a dropped, doubled or swapped letter
_ROUNDS = 8  # each round fixes at least one field; a profile has far fewer nesting levels


def _strip(tp: Any) -> Any:
    """The type under Annotated and Optional."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _field(model: type[BaseModel], key: Any) -> tuple[str, FieldInfo] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info
    return None


def field_names_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The YAML names of the fields the model at `loc` accepts (empty when `loc` is no model)."""
    tp: Any = root
    for part in loc:
        tp = _strip(tp)
        if _is_model(tp):
            found = _field(tp, part)
            if found is None:
                return []
            tp = found[1].annotation
        elif get_origin(tp) is list and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return []
    tp = _strip(tp)
    if not _is_model(tp):
        return []
    return [info.alias or name for name, info in tp.model_fields.items()]


def _close_field(model: type[BaseModel], key: Any) -> str | None:
    """The model's field that the unknown `key` most likely misspells."""
    names = [info.alias or name for name, info in model.model_fields.items()]
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=_CUTOFF)
    return close[0] if close else None


def did_you_mean(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`did you mean X?` for an unknown field at `loc`, or the fields allowed there."""
    names = field_names_at(root, loc[:-1])
    if not names:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=_CUTOFF)
    if close:
        return f"did you mean {close[0]}?"
    return f"fields here: {', '.join(names)}"


def _placeholder(annotation: Any) -> Any:
    """A value that passes the field's validation; only skipped checks could ever read it."""
    tp = _strip(annotation)
    if get_origin(tp) is Literal:
        return get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return next(iter(tp)).value
    if tp is int:
        return 1
    if tp is str:
        return "placeholder"
    return None


def _prune(
    root: type[BaseModel], data: Any, loc: tuple[Any, ...]
) -> tuple[tuple[Any, ...], ...] | None:
    """Remove or replace the field that `loc` is in; the paths that failed, or None if none can."""
    tp: Any = root
    node = data
    for depth, part in enumerate(loc):
        tp = _strip(tp)
        if not (_is_model(tp) and isinstance(node, dict)):
            return None
        failed = loc[: depth + 1]
        found = _field(tp, part)
        if found is None:  # an unknown field, maybe a misspelt one: that one is unknown too
            node.pop(part, None)
            meant = _close_field(tp, part)
            return (failed, (*loc[:depth], meant)) if meant else (failed,)
        _, info = found
        inner = _strip(info.annotation)
        last = depth == len(loc) - 1
        if last or not (_is_model(inner) and isinstance(node.get(part), dict)):
            if not info.is_required():
                node.pop(part, None)
                return (failed,)
            value = _placeholder(info.annotation)
            if value is None:
                return None
            node[part] = value
            return (failed,)
        tp, node = info.annotation, node[part]
    return None


def parsed_part(
    root: type[BaseModel], data: dict[str, Any], errors: list[Any]
) -> tuple[BaseModel, set[tuple[Any, ...]]] | None:
    """The model built from what parsed, and the paths that did not; None if nothing sound is left."""
    work = copy.deepcopy(data)
    failed: set[tuple[Any, ...]] = set()
    for _ in range(_ROUNDS):
        for error in errors:
            paths = _prune(root, work, tuple(error["loc"]))
            if paths is None:
                return None
            failed.update(paths)
        try:
            return root.model_validate(work), failed
        except ValidationError as err:
            errors = err.errors()
    return None
