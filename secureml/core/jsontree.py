"""Deep copies of JSON-shaped data, several times faster than `copy.deepcopy`."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

T = TypeVar("T")


def copy_json(value: T) -> T:
    """A deep copy of `value`, with no dict or list shared with it."""
    return _copy(value)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list:
        return [_copy(item) for item in value]
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if kind is tuple:
        return tuple(_copy(item) for item in value)
    return copy.deepcopy(value)
