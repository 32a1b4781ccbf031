"""The pipeline YAML's documents written as block YAML, several times faster than PyYAML.

Scalars only in forms every YAML reader loads back as the same value (docs/architecture.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

_JOINED_DEPTH = 4  # mappings at indents 0 and 2
_PLAIN = re.compile(r"(?:[A-Za-z_/]|-[A-Za-z])[A-Za-z0-9_./-]*\Z")
_YAML11_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})
_LITERAL = re.compile(r"[\x20-\x7e\t\n]*\Z")
_NEEDS_ESCAPE = re.compile(r'[^\x20-\x7e]|["\\]')
_NAMED_ESCAPES = {
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
    '"': '\\"',
    "\\": "\\\\",
}


def dump_documents(documents: Sequence[dict[str, Any]]) -> str:
    """The documents as one YAML stream, the second and later ones after `---`."""
    out: list[str] = []
    for index, document in enumerate(documents):
        if index:
            out.append("---\n")
        if document:
            _mapping(document, 0, out)
        else:
            out.append("{}\n")
    return "".join(out)


def _mapping(data: dict[str, Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for key in sorted(data):
        value = data[key]
        written = _key(key)
        # YAML reads a key on its value's line only up to 1024 characters: longer ones as `? key`
        head = f"{pad}{written}:" if len(written) < 1000 else f"{pad}? {written}\n{pad}:"
        kind = type(value)
        if kind is dict and value and indent < _JOINED_DEPTH:
            # each of the top levels' entries (a component, an executor) joined into one string
            # as it is done: the small pieces of one entry, not of the whole pipeline, at a time
            pieces = [head + "\n"]
            _mapping(value, indent + 2, pieces)
            out.append("".join(pieces))
        elif kind is dict and value:
            out.append(head + "\n")
            _mapping(value, indent + 2, out)
        elif kind is list and value:
            out.append(head + "\n")
            _sequence(value, indent, out)  # indentless, as kfp's writer puts lists under keys
        else:
            out.append(head + _scalar_text(value, indent))


def _sequence(data: list[Any], indent: int, out: list[str]) -> None:
    pad = " " * indent
    for item in data:
        kind = type(item)
        if kind is dict and item:
            # the entry's first key on the dash's line, the others under it
            nested: list[str] = []
            _mapping(item, indent + 2, nested)
            nested[0] = f"{pad}- {nested[0][indent + 2 :]}"
            out += nested
        elif kind is list and item:
            out.append(f"{pad}-\n")
            _sequence(item, indent + 2, out)
        else:
            out.append(f"{pad}-{_scalar_text(item, indent)}")


# The written form of each string a pipeline's documents repeat (keys such as `name` and
# `parameterType`, values such as `STRING` and `runtimeValue`): a pure function of the text, kept
# until a table holds `_KEPT` of them (then emptied, so unique texts never pile up: at 500 steps
# 4,096 of each held 2 MiB more at the peak for no more speed than 1,024).
_KEPT = 1024
_WRITTEN_KEYS: dict[str, str] = {}
_WRITTEN_VALUES: dict[str, str] = {}


def _key(key: Any) -> str:
    written = _WRITTEN_KEYS.get(key)  # (a str key never equals a key of another type)
    if written is None:
        if type(key) is not str:
            raise TypeError(f"mapping key {key!r} is not a string")
        written = key if _is_plain(key) else _quoted(key)
        _keep(_WRITTEN_KEYS, key, written)
    return written


def _keep(table: dict[str, str], text: str, written: str) -> None:
    if len(table) >= _KEPT:
        table.clear()
    table[text] = written


def _scalar_text(value: Any, indent: int) -> str:
    """` value` and its line break (several lines for a literal block) after a key or dash."""
    kind = type(value)
    if kind is str:
        written = _WRITTEN_VALUES.get(value)
        if written is not None:
            return written
        if "\n" in value and _is_literal(value):
            return _literal(value, indent + 2)  # (indented: not kept)
        written = f" {value}\n" if _is_plain(value) else f" {_quoted(value)}\n"
        _keep(_WRITTEN_VALUES, value, written)
        return written
    if kind is bool:
        return " true\n" if value else " false\n"
    if value is None:
        return " null\n"
    if kind is int:
        return f" {value}\n"
    if kind is float:
        return f" {_float(value)}\n"
    if kind is dict or kind is list:  # only empty ones get here
        return " {}\n" if kind is dict else " []\n"
    raise TypeError(f"cannot write {kind.__name__} {value!r} as pipeline YAML")


def _is_plain(text: str) -> bool:
    return _PLAIN.match(text) is not None and text.lower() not in _YAML11_WORDS


def _is_literal(text: str) -> bool:
    return text[0] not in " \n" and not text.endswith("\n\n") and _LITERAL.match(text) is not None


def _literal(text: str, indent: int) -> str:
    pad = " " * indent
    body = text[:-1] if text.endswith("\n") else text
    lines = "".join(f"{pad}{line}\n" if line else "\n" for line in body.split("\n"))
    return (" |\n" if text.endswith("\n") else " |-\n") + lines


def _quoted(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value).lower()
    if "." not in text and "e" in text:  # 1e+16: YAML 1.1 reads a float only with a dot
        text = text.replace("e", ".0e", 1)
    return text
