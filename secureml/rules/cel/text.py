"""CEL source text shared by the rule catalogue and the bundle: literals, label and image tests."""

from __future__ import annotations

from collections.abc import Iterable

from secureml.core.image_ref import REFERENCE_SUFFIX_STARTS

LABELS = "object.metadata.labels"

# Escapes CEL defines for characters that may not stand for themselves in a one-line literal.
_NAMED_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """`text` as a single-quoted CEL string literal that evaluates to exactly `text`.

    Backslash, the quote, line feed, carriage return and tab are escaped by name; any other
    character that is not printable (`str.isprintable`: control, format, private-use, unassigned,
    and separators but the space) as `\\uXXXX` or `\\UXXXXXXXX`, so no invisible character reaches a
    policy. Printable non-ASCII characters stay as they are (CEL source is UTF-8). A lone surrogate
    is no Unicode scalar value: no CEL string holds one, and it is refused rather than rendered into
    an expression the server would reject.
    """
    if text.isascii() and text.isprintable() and "\\" not in text and "'" not in text:
        return "'" + text + "'"  # nothing to escape (the common case: names, paths, images)
    return "'" + _escaped(text) + "'"


def _escaped(text: str) -> str:
    """The body of `quote(text)`, written character by character."""
    out: list[str] = []
    for char in text:
        code = ord(char)
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"a lone surrogate (U+{code:04X}) has no CEL string literal")
        elif char.isprintable():
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def string_list(items: Iterable[str]) -> str:
    """A CEL list literal of strings."""
    return "[" + ", ".join(quote(item) for item in items) + "]"


def label_present(key: str) -> str:
    """The submitted pod carries the label `key` (any value)."""
    return f"(has({LABELS}) && {quote(key)} in {LABELS})"


def label_is(key: str, value: str) -> str:
    """The submitted pod's label `key` is `value`."""
    return (
        f"(has({LABELS}) && {quote(key)} in {LABELS} && {LABELS}[{quote(key)}] == {quote(value)})"
    )


def label_in(key: str, values: Iterable[str]) -> str:
    """The submitted pod's label `key` is one of `values`."""
    return (
        f"(has({LABELS}) && {quote(key)} in {LABELS} && "
        f"{LABELS}[{quote(key)}] in {string_list(values)})"
    )


def image_of_repository(var: str, repository: str) -> str:
    """The container `var`'s image is `repository` itself or one of its tags or digests.

    Compared on whole path segments (`secureml.core.image_ref.REFERENCE_SUFFIX_STARTS`): `REPO`, `REPO:...`,
    `REPO@...`; `REPO-debug`, `REPOx` and `REPO/shell` are other repositories. String tests, not
    a pattern: the Python engine compiles a pattern on every call (~150 us against ~1 us).
    """
    forms = [f"{var}.image == {quote(repository)}"] + [
        f"{var}.image.startsWith({quote(repository + start)})" for start in REFERENCE_SUFFIX_STARTS
    ]
    return "(" + " || ".join(forms) + ")"
