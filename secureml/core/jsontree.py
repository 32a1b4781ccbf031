"""Deep copies of JSON-shaped data (dicts, lists, strings, numbers, booleans, null).

The preview builds every pod from a few shared templates and must never hand out a shared inner
dict (a later mutation would change two pods). `copy.deepcopy` does that at several times the
cost, most of it spent on its memo of shared objects, which JSON data has no use for: here every
dict and list is copied, scalars are immutable and shared, and anything else goes to
`copy.deepcopy`.
"""

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
