"""CEL laid out for people: the bundle's expressions folded over lines, tokens unchanged."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

WIDTH = 100
INDENT = 2
# The API server refuses a CEL expression longer than 100,000 code points (Kubernetes' CEL
# expression size limit). Deep nesting indents a lot: where the folded text would pass that,
# deeper levels share one column (the widest that fits), and never the limit is passed by folding.
SERVER_LIMIT = 100_000
_INDENTS = (WIDTH, 40, 20, 8, 0)

# Tokens of CEL's lexical grammar (cel-spec's langdef.md), longest first where it matters.
_STRING = re.compile(
    r"""(?:[rR][bB]?|[bB][rR]?)?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\""""
    r"""|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""",
    re.DOTALL,
)
_RAW_STRING = re.compile(
    r"""(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*")""", re.DOTALL
)
_WORD = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*|0[xX][0-9a-fA-F]+[uU]?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?"
)
_OPERATOR = re.compile(r"&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE = re.compile(r"[ \t\r\n\f]+")
_OPENING = {"(": ")", "[": "]", "{": "}"}


class CelLayoutError(ValueError):
    """The expression is not CEL this module can lay out (an unknown character, an unclosed
    bracket) or the folded text would not have the original's tokens."""


@dataclass(frozen=True)
class _Token:
    text: str
    start: int
    end: int


def tokens(expression: str) -> list[_Token]:
    """The expression's tokens, whitespace left out. A comment is an error (`fold` keeps such an
    expression as written)."""
    out: list[_Token] = []
    at = 0
    while at < len(expression):
        space = _SPACE.match(expression, at)
        if space:
            at = space.end()
            continue
        if expression.startswith("//", at):
            raise CelLayoutError("the expression has a comment")
        for pattern in (_RAW_STRING, _STRING, _WORD, _OPERATOR):
            found = pattern.match(expression, at)
            if found:
                break
        else:
            raise CelLayoutError(f"no CEL token at offset {at}: {expression[at : at + 20]!r}")
        out.append(_Token(found.group(), at, found.end()))
        at = found.end()
    return out


@dataclass(frozen=True)
class _Group:
    """A bracketed part: its opening and closing tokens and what lies between."""

    open: _Token
    items: list[_Item]
    close: _Token

    @property
    def start(self) -> int:
        return self.open.start

    @property
    def end(self) -> int:
        return self.close.end


_Item = _Token | _Group


def _tree(found: list[_Token]) -> list[_Item]:
    stack: list[tuple[_Token | None, list[_Item]]] = [(None, [])]
    for token in found:
        if token.text in _OPENING:
            stack.append((token, []))
        elif token.text in _OPENING.values():
            opening, items = stack.pop()
            if opening is None or _OPENING[opening.text] != token.text or not stack:
                raise CelLayoutError(f"unbalanced {token.text!r} at offset {token.start}")
            stack[-1][1].append(_Group(opening, items, token))
        else:
            stack[-1][1].append(token)
    if len(stack) != 1:
        raise CelLayoutError("an unclosed bracket")
    return stack[0][1]


class _Printer:
    def __init__(self, source: str, max_indent: int) -> None:
        self.source, self.max_indent = source, max_indent

    def indent(self, column: int) -> int:
        """Where a nested line starts: deeper levels share `max_indent`'s column."""
        return min(column, self.max_indent)

    def flat(self, items: list[_Item]) -> str:
        return self.source[items[0].start : items[-1].end] if items else ""

    def fits(self, text: str, column: int) -> bool:
        return "\n" not in text and column + len(text) <= WIDTH

    def sequence(self, items: list[_Item], column: int) -> str:
        """`items` laid out starting at `column` (its first line is not indented here)."""
        text = self.flat(items)
        if self.fits(text, column):
            return text
        for separators in ((",",), ("?", ":"), ("||",), ("&&",)):
            parts = _split(items, separators)
            if len(parts) > 1 and (separators != ("?", ":") or _has(items, "?")):
                return self.parts(parts, separators, column)
        return self.chain(items, column)

    def parts(
        self, parts: list[tuple[str, list[_Item]]], separators: tuple[str, ...], column: int
    ) -> str:
        pad = "\n" + " " * column
        if separators == (",",):
            texts = [self.sequence(part, column) for _, part in parts]
            if any("\n" in text for text in texts):
                return ("," + pad).join(texts)
            return pad.join(_packed(texts, column))  # short elements, as many a line as fit
        lines = [self.sequence(parts[0][1], column)]
        for operator, part in parts[1:]:
            lines.append(
                operator + " " + self.sequence(part, self.indent(column + len(operator) + 1))
            )
        return pad.join(lines)

    def chain(self, items: list[_Item], column: int) -> str:
        """Items without a separator between them (`a.b(...)[...]`): as written, each bracketed
        part that does not fit where it starts opened over lines."""
        out = ""
        for index, item in enumerate(items):
            if index and self.source[items[index - 1].end : item.start]:
                out += " "
            if isinstance(item, _Token):
                out += item.text
                continue
            current = (0 if "\n" in out else column) + len(out.rsplit("\n", 1)[-1])
            text = self.source[item.start : item.end]
            out += text if self.fits(text, current) else self.opened(item, column)
        return out

    def opened(self, group: _Group, column: int) -> str:
        if not group.items:
            return group.open.text + group.close.text
        head = ""
        items = group.items
        if (
            group.open.text == "("
            and len(items) > 2
            and isinstance(items[0], _Token)
            and _IDENTIFIER.fullmatch(items[0].text)
            and isinstance(items[1], _Token)
            and items[1].text == ","
        ):
            head, items = items[0].text + ",", items[2:]  # a macro's variable: `all(c,`
        inner_column = self.indent(column + INDENT)
        inner = self.sequence(items, inner_column)
        return (
            group.open.text
            + head
            + "\n"
            + " " * inner_column
            + inner
            + "\n"
            + " " * column
            + group.close.text
        )


def _split(items: list[_Item], separators: tuple[str, ...]) -> list[tuple[str, list[_Item]]]:
    parts: list[tuple[str, list[_Item]]] = [("", [])]
    for item in items:
        if isinstance(item, _Token) and item.text in separators:
            parts.append((item.text, []))
        else:
            parts[-1][1].append(item)
    return parts if all(part for _, part in parts) else [("", items)]


def _packed(texts: list[str], column: int) -> list[str]:
    """Comma-separated texts filled into lines of at most `WIDTH` from `column`."""
    lines: list[str] = []
    for index, text in enumerate(texts):
        piece = text + ("," if index < len(texts) - 1 else "")
        if lines and column + len(lines[-1]) + 1 + len(piece) <= WIDTH:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def _has(items: list[_Item], text: str) -> bool:
    return any(isinstance(item, _Token) and item.text == text for item in items)


def fold(expression: str) -> str:
    """`expression` over lines of at most `WIDTH` characters where its structure allows; the
    same tokens in the same order. An expression that already fits, or has a comment, is
    returned as it is."""
    if "\n" not in expression and len(expression) <= WIDTH:
        return expression
    try:
        found = tokens(expression)
    except CelLayoutError:
        return expression  # a comment: leave the author's layout
    if not found:
        return expression
    tree = _tree(found)
    for max_indent in _INDENTS:
        folded = _Printer(expression, max_indent).sequence(tree, 0)
        if len(folded) <= SERVER_LIMIT:
            break
    else:
        return expression  # even flat, folding would not fit the server: one line, as written
    if [t.text for t in tokens(folded)] != [t.text for t in found]:
        raise CelLayoutError("folding changed the expression's tokens")
    return folded


_POLICY_KINDS = frozenset({"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"})
_CEL_KEYS = frozenset({"expression", "messageExpression"})


def fold_policy(obj: dict[str, Any]) -> dict[str, Any]:
    """An admission policy with every CEL expression of its spec folded (`fold`); any other
    object as it is."""
    if obj.get("kind") not in _POLICY_KINDS:
        return obj
    return {**obj, "spec": _folded(obj["spec"])}


def _folded(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: fold(value) if key in _CEL_KEYS and isinstance(value, str) else _folded(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_folded(value) for value in node]
    return node
