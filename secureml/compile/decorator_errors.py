"""Every bad `@secure_component` of a file in one report, instead of the first one only."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any, NoReturn

from secureml.core.errors import SecuremlError

_COLLECTED: ContextVar[list[SecuremlError] | None] = ContextVar(
    "secureml_decorator_errors", default=None
)


class ComponentNotBuiltError(SecuremlError):
    """A pipeline used a component whose decoration failed (the decoration's error is reported)."""


@contextlib.contextmanager
def collecting() -> Iterator[list[SecuremlError]]:
    """Record decoration errors instead of raising them; yields the list they are recorded in."""
    errors: list[SecuremlError] = []
    token = _COLLECTED.set(errors)
    try:
        yield errors
    finally:
        _COLLECTED.reset(token)


def located(err: SecuremlError, target: Any) -> SecuremlError:
    """`err` with the component's `file:line` in front of its `where`."""
    code = getattr(target, "__code__", None)
    if code is None:
        return err
    err.where = f"{code.co_filename}:{code.co_firstlineno}: {err.where}".rstrip(": ")
    return err


def recorded_or_raised(err: SecuremlError, target: Any) -> Any:
    """Raise `err`, or, while collecting, record it and return a stand-in for the component."""
    collected = _COLLECTED.get()
    if collected is None:
        raise err
    collected.append(located(err, target))
    name = getattr(target, "__name__", repr(target))

    def not_built(*args: Any, **kwargs: Any) -> NoReturn:
        raise ComponentNotBuiltError(f"component {name!r} was not built (its error is reported)")

    return not_built


def did_you_mean(unknown: str, known: Iterable[str]) -> str:
    """` (did you mean image=?)` for a close known keyword, else ``."""
    close = difflib.get_close_matches(unknown, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}=?)" if close else ""
