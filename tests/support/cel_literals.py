"""The API server's homogeneous aggregate literal check, for CEL text the Python engine accepts.

Kubernetes compiles every admission-policy expression with cel-go's `HomogeneousAggregateLiterals`:
the elements of a list literal, and the keys and the values of a map literal, must all have one
type (`[1, 'a']` and `{'name': 'x', 'readOnly': true}` are refused at create: "expected type
'string' but found 'bool'"). The Python engine (`cel`) accepts both and exposes no AST, so this
module parses the text itself and infers what a type checker can know without the Pod schema:
literal types, the results of operators and of the functions and macros the rules use, the
element types of literal lists bound by a macro. Everything read from `object` is `dyn`, which
cel-go accepts beside any type, so the check never refuses what the server admits for a reason
it cannot see; where it refuses, the server does too. The same inference refuses the other
type errors it can see: `+` of lists with different element types, a ternary whose branches differ.

    type_errors(expression) -> list[str]   # empty: no error this check can see
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- types ---------------------------------------------------------------------------------------
# A type is a string ("int", "string", "dyn", "struct:<name>", VAR: the free element type of an
# empty literal, UNKNOWN: what this module cannot tell without the schema or a function's
# declaration) or a tuple ("list", elem) / ("map", key, value).
Type = str | tuple
DYN = "dyn"
VAR = "?"
UNKNOWN = "unknown"
_FREE = (VAR, UNKNOWN)


def _assignable(a: Type, b: Type) -> bool:
    """cel-go's checker `isAssignable` for these types: `dyn` goes with anything (overloads)."""
    if a in (DYN, *_FREE) or b in (DYN, *_FREE):
        return True
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[0] != b[0]:
            return False
        return all(_assignable(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    if "null" in (a, b):
        other = b if a == "null" else a
        return other == "null" or other.startswith("struct:")
    return a == b


def _equivalent(a: Type, b: Type) -> bool:
    """The homogeneous-literal validator's test: the same type exactly (`dyn` is not `int`)."""
    if a in _FREE or b in _FREE:
        return True
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[0] != b[0]:
            return False
        return all(_equivalent(x, y) for x, y in zip(a[1:], b[1:], strict=True))
    return a == b


def _general(a: Type, b: Type) -> Type:
    """The more general of two assignable types (as cel-go's `mostGeneral`)."""
    for weakest in (UNKNOWN, DYN):
        if weakest in (a, b):
            return weakest
    if a == VAR:
        return b
    if b == VAR:
        return a
    if isinstance(a, tuple) and isinstance(b, tuple):
        return (a[0], *(_general(x, y) for x, y in zip(a[1:], b[1:], strict=True)))
    return b if a == "null" else a


def _name(t: Type) -> str:
    if isinstance(t, tuple):
        return f"{t[0]}({', '.join(_name(x) for x in t[1:])})"
    return t.removeprefix("struct:")


# --- tokens --------------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<double>\d*\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<uint>(?:0[xX][0-9a-fA-F]+|\d+)[uU])
  | (?P<int>0[xX][0-9a-fA-F]+|\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[<>+\-*/%!?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            raise SyntaxError(f"cannot read CEL at {at}: {text[at : at + 20]!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append(_Token(kind, match.group(), at))
        at = match.end()
    out.append(_Token("end", "", len(text)))
    return out


# --- parser with type inference ------------------------------------------------------------------
_BOOL_FUNCTIONS = {"matches", "startsWith", "endsWith", "contains", "has", "exists_one"}
_RESULT = {"size": "int", "int": "int", "uint": "uint", "double": "double", "string": "string",
           "bytes": "bytes", "bool": "bool", "indexOf": "int", "lastIndexOf": "int"}  # fmt: skip
_MACROS = {"all", "exists", "exists_one", "map", "filter"}
_LITERALS = {"true": "bool", "false": "bool", "null": "null"}


class _Checker:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0
        self.errors: list[str] = []
        self.scopes: list[dict[str, Type]] = [{}]

    # token helpers
    def peek(self, offset: int = 0) -> _Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def take(self, text: str | None = None) -> _Token:
        token = self.peek()
        if text is not None and token.text != text:
            raise SyntaxError(f"expected {text!r} at {token.at}, found {token.text!r}")
        self.pos += 1
        return token

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in ("op", "ident"):
            self.pos += 1
            return True
        return False

    def error(self, at: int, message: str) -> None:
        self.errors.append(f"{message} at {at}: ...{self.text[max(at - 30, 0) : at + 30]}...")

    def elements(self, at: list[int], types: list[Type], what: str) -> Type:
        """Type of a literal's elements (keys or values): the validator compares each with the
        first, exactly, and reports the first mismatch; the checker joins them."""
        for position, current in zip(at[1:], types[1:], strict=True):
            if not _equivalent(types[0], current):
                self.error(
                    position,
                    f"{what}: expected type '{_name(types[0])}' but found '{_name(current)}'",
                )
                break
        joined: Type = VAR
        for current in types:
            joined = _general(joined, current) if _assignable(joined, current) else UNKNOWN
        return joined

    # grammar (cel-spec's): expr = or ["?" or ":" expr]
    def expr(self) -> Type:
        condition = self.disjunction()
        if not self.accept("?"):
            return condition
        at = self.peek().at
        yes = self.disjunction()
        self.take(":")
        no = self.expr()
        if not _assignable(yes, no):
            self.error(
                at, f"no matching overload for '_?_:_' applied to ({_name(yes)}, {_name(no)})"
            )
            return UNKNOWN
        return _general(yes, no)

    def disjunction(self) -> Type:
        result = self.conjunction()
        while self.accept("||"):
            self.conjunction()
            result = "bool"
        return result

    def conjunction(self) -> Type:
        result = self.relation()
        while self.accept("&&"):
            self.relation()
            result = "bool"
        return result

    def relation(self) -> Type:
        result = self.addition()
        while self.peek().text in ("<", "<=", ">", ">=", "==", "!=", "in"):
            self.take()
            self.addition()
            result = "bool"
        return result

    def addition(self) -> Type:
        left = self.multiplication()
        while self.peek().text in ("+", "-"):
            at = self.take().at
            right = self.multiplication()
            left = self.arithmetic(at, left, right)
        return left

    def arithmetic(self, at: int, left: Type, right: Type) -> Type:
        """The result of `+`/`-`: one overload of the known operand's type; both `dyn` match
        several overloads (`dyn`); lists of different element types match none."""
        if UNKNOWN in (left, right):
            return UNKNOWN
        if left == DYN and right == DYN:
            return DYN
        known = right if left == DYN else left
        other = left if known is right else right
        if isinstance(known, tuple) and known[0] == "list":
            if isinstance(other, tuple) and other[0] == "list":
                if not _assignable(known, other):
                    self.error(
                        at,
                        f"no matching overload for '_+_' applied to ({_name(left)}, {_name(right)})",
                    )
                    return UNKNOWN
                return _general(known, other)
            return known if other == DYN else UNKNOWN
        if other in (known, DYN) and known in ("string", "int", "uint", "double", "bytes"):
            return known
        return UNKNOWN

    def multiplication(self) -> Type:
        left = self.unary()
        while self.peek().text in ("*", "/", "%"):
            self.take()
            right = self.unary()
            numeric = {left, right} - {DYN}
            if not numeric:
                left = DYN
            elif len(numeric) == 1 and numeric <= {"int", "uint", "double"}:
                left = numeric.pop()
            else:
                left = UNKNOWN
        return left

    def unary(self) -> Type:
        if self.accept("!"):
            self.unary()
            return "bool"
        if self.accept("-"):
            operand = self.unary()
            return operand if operand in ("int", "double", DYN) else UNKNOWN
        return self.member()

    def member(self) -> Type:
        qualified = self.peek().kind == "ident" and self.peek().text not in _LITERALS
        name = self.peek().text if qualified else ""
        result = self.primary()
        qualified = qualified and self.peek(-1).kind == "ident"  # not a call `f(...)`
        while True:
            if self.accept("."):
                field = self.take()
                if field.kind != "ident":
                    raise SyntaxError(f"expected a field name at {field.at}")
                if self.peek().text == "(":
                    result = self.method(result, field.text)
                    qualified = False
                else:
                    name = f"{name}.{field.text}" if qualified else ""
                    result = self.select(result)
            elif self.accept("["):
                index = self.expr()
                self.take("]")
                result = self.index(result, index)
                qualified = False
            elif self.peek().text == "{" and qualified:
                self.take("{")
                self.fields()
                result = f"struct:{name}"
                qualified = False
            else:
                return result

    @staticmethod
    def select(target: Type) -> Type:
        """A field of `dyn` (all of `object`) is `dyn`; of a map literal, its value type."""
        if target == DYN:
            return DYN
        if isinstance(target, tuple) and target[0] == "map":
            return target[2]
        return UNKNOWN

    @staticmethod
    def index(container: Type, index: Type) -> Type:
        if isinstance(container, tuple):
            return container[1] if container[0] == "list" else container[2]
        return DYN if container == DYN else UNKNOWN

    def primary(self) -> Type:
        token = self.peek()
        if token.text == "(" and token.kind == "op":
            self.take()
            result = self.expr()
            self.take(")")
            return result
        if token.text == "[":
            return self.list_literal()
        if token.text == "{":
            return self.map_literal()
        if token.text == "." and self.peek(1).kind == "ident":  # leading-dot qualified name
            self.take()
            token = self.peek()
        self.take()
        if token.kind == "string":
            prefix = re.match(r"[rRbB]*", token.text).group().lower()
            return "bytes" if "b" in prefix else "string"
        if token.kind in ("int", "uint", "double"):
            return token.kind
        if token.kind != "ident":
            raise SyntaxError(f"unexpected {token.text!r} at {token.at}")
        if token.text in _LITERALS:
            return _LITERALS[token.text]
        if self.peek().text == "(":
            self.take("(")
            self.arguments()
            if token.text in _BOOL_FUNCTIONS:
                return "bool"
            return _RESULT.get(token.text, UNKNOWN)
        for scope in reversed(self.scopes):
            if token.text in scope:
                return scope[token.text]
        return DYN if token.text in ("object", "oldObject", "request", "params") else UNKNOWN

    def arguments(self) -> list[Type]:
        types: list[Type] = []
        while not self.accept(")"):
            types.append(self.expr())
            if not self.accept(","):
                self.take(")")
                break
        return types

    def method(self, target: Type, name: str) -> Type:
        self.take("(")
        if name in _MACROS and self.peek().kind == "ident" and self.peek(1).text == ",":
            var = self.take().text
            self.take(",")
            # A list binds its elements, a map its keys: both are the first type parameter.
            element = target[1] if isinstance(target, tuple) else DYN if target == DYN else UNKNOWN
            self.scopes.append({var: element})
            try:
                bodies = [self.expr()]
                while self.accept(","):
                    bodies.append(self.expr())
            finally:
                self.scopes.pop()
            self.take(")")
            if name == "map":
                return ("list", bodies[-1])
            if name == "filter":
                return ("list", element)
            return "bool"
        self.arguments()
        if name in _BOOL_FUNCTIONS:
            return "bool"
        return _RESULT.get(name, UNKNOWN)

    def list_literal(self) -> Type:
        self.take("[")
        at: list[int] = []
        types: list[Type] = []
        while not self.accept("]"):
            self.accept("?")  # optional element marker
            at.append(self.peek().at)
            types.append(self.expr())
            if not self.accept(","):
                self.take("]")
                break
        return ("list", self.elements(at, types, "list literal"))

    def map_literal(self) -> Type:
        self.take("{")
        key_at: list[int] = []
        keys: list[Type] = []
        value_at: list[int] = []
        values: list[Type] = []
        while not self.accept("}"):
            self.accept("?")
            key_at.append(self.peek().at)
            keys.append(self.expr())
            self.take(":")
            value_at.append(self.peek().at)
            values.append(self.expr())
            if not self.accept(","):
                self.take("}")
                break
        key = self.elements(key_at, keys, "map literal key")
        return ("map", key, self.elements(value_at, values, "map literal value"))

    def fields(self) -> None:
        """Field initialisers of a typed object construction: each value is typed by the schema,
        not joined with the others; literals inside them are still checked."""
        while not self.accept("}"):
            self.accept("?")
            if self.take().kind != "ident":
                raise SyntaxError(f"expected a field name at {self.peek(-1).at}")
            self.take(":")
            self.expr()
            if not self.accept(","):
                self.take("}")
                break


def type_errors(expression: str) -> list[str]:
    """The homogeneous-literal (and list `+` / ternary) type errors of `expression`; [] if none."""
    checker = _Checker(expression)
    checker.expr()
    if checker.peek().kind != "end":
        raise SyntaxError(f"unexpected {checker.peek().text!r} at {checker.peek().at}")
    return checker.errors
