"""A rule's CEL text rewritten for the C++ engine's speed, to the same value.

Why and what: docs/performance.md and docs/admission-rules.md (how the rule modules are written).
"""

from __future__ import annotations

import re

VARIABLE = "secureml_k"
MATCHES = "secureml_matches"  # the member function `cel_cpp` declares
# String literals this tokeniser does not take apart (the rules are written without them).
# (A prefix letter follows no word character and no quote: `'b'` is a string holding a b.)
_UNTOKENISED = re.compile(r"""(?<![A-Za-z0-9_'"])[rRbB]{1,2}['"]|'''|\"\"\"""")
# One token: a quoted string literal (with escapes), a number, a word, or any one character.
_TOKEN = re.compile(
    r"""(?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
    r"|(?P<number>-?[0-9][0-9a-fA-FxXuU.eE+]*)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<space>\s+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
_CONSTANT_WORDS = frozenset({"true", "false", "null"})
_COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Shorter lists, and lists outside a comprehension's body (built once anyway), cost less to build
# than to look up (measured on the team-a rules).
_SHORTEST = 4


def rewritten(expression: str) -> str | None:
    """`expression` rewritten for the fast engine (see the module docstring), or None when there
    is nothing to rewrite or the text is not taken apart."""
    if VARIABLE in expression or MATCHES in expression or _UNTOKENISED.search(expression):
        return None  # the name is taken, or raw, bytes or triple-quoted strings: left as it is
    tokens = [(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(expression)]
    if any(kind == "other" and text in "'\"" for kind, text, _, _ in tokens):
        return None  # a quote that opens no string literal
    significant = [token for token in tokens if token[0] != "space"]
    constants: list[str] = []
    spans: list[tuple[int, int]] = []
    matches = _constant_matches(significant)
    opened: list[bool] = []  # per open parenthesis: whether it holds a comprehension's body
    index = 0
    while index < len(significant):
        kind, text, start, _ = significant[index]
        if text == "(":
            macro = (
                index >= 2
                and significant[index - 2][1] == "."
                and (significant[index - 1][1] in _COMPREHENSIONS)
            )
            opened.append(macro)
        elif text == ")" and opened:
            opened.pop()
        elif text == "[" and any(opened) and _starts_list(significant, index):
            end = _constant_list_end(significant, index)
            if end is not None and (end - index) // 2 >= _SHORTEST:
                close = significant[end][3]
                spans.append((start, close))
                constants.append(expression[start:close])
                index = end + 1
                continue
        index += 1
    if not constants and not matches:
        return None
    replacements = sorted(
        [(start, end, f"{VARIABLE}[{number}]") for number, (start, end) in enumerate(spans)]
        + [(start, end, MATCHES) for start, end in matches]
    )
    out, last = [], 0
    for start, end, text in replacements:
        out.append(expression[last:start])
        out.append(text)
        last = end
    out.append(expression[last:])
    if not constants:
        return "".join(out)
    bound = ", ".join(f"dyn({constant})" for constant in constants)
    return f"[[{bound}]].all({VARIABLE}, {''.join(out)})"


def _constant_matches(tokens: list[tuple[str | None, str, int, int]]) -> list[tuple[int, int]]:
    """The spans of the word `matches` in each `.matches('<a string literal>')`."""
    return [
        (start, end)
        for index, (kind, text, start, end) in enumerate(tokens)
        if text == "matches"
        and 0 < index < len(tokens) - 3
        and tokens[index - 1][1] == "."
        and tokens[index + 1][1] == "("
        and tokens[index + 2][0] == "string"
        and tokens[index + 3][1] == ")"
    ]


def _starts_list(tokens: list[tuple[str | None, str, int, int]], index: int) -> bool:
    """Whether the `[` at `index` opens a list literal (not an index such as `a[0]`)."""
    if index == 0:
        return True
    kind, text, _, _ = tokens[index - 1]
    if kind == "word":
        return text == "in"
    return not (kind in ("string", "number") or text in (")", "]", "}"))


def _constant_list_end(tokens: list[tuple[str | None, str, int, int]], index: int) -> int | None:
    """The index of the `]` closing a non-empty list of literals that opens at `index`, or None."""
    position, items = index + 1, 0
    while position < len(tokens):
        kind, text, _, _ = tokens[position]
        literal = kind in ("string", "number") or (kind == "word" and text in _CONSTANT_WORDS)
        if not literal:
            return None
        items += 1
        follower = tokens[position + 1][1] if position + 1 < len(tokens) else ""
        if follower == "]":
            return position + 1 if items else None
        if follower != ",":
            return None
        position += 2
    return None
