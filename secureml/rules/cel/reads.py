"""What of a pod a CEL expression can read, found from its syntax tree (for the verdict memo).

What each kind of read means: docs/performance.md ("rules", the verdict memo).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from secureml.rules.cel.syntax import (
    Call,
    Comprehension,
    Const,
    CreateList,
    CreateStruct,
    Ident,
    Node,
    Select,
)

ROOTS = ("object", "oldObject")


class Read:
    """The parts of one value an expression can read (see the module docstring)."""

    __slots__ = ("each", "fields", "index", "size", "whole")

    def __init__(self) -> None:
        self.whole = False
        self.size = False
        self.index = False
        self.each: Read | None = None
        self.fields: dict[str, Read] = {}

    def to_json(self) -> object:
        """This read as JSON (`from_json` gives it back): kept between processes."""
        if self.whole:
            return 1
        each = None if self.each is None else self.each.to_json()
        fields = {name: read.to_json() for name, read in self.fields.items()}
        return [int(self.size), int(self.index), each, fields]

    @classmethod
    def from_json(cls, data: object) -> Read:
        read = cls()
        if data == 1:
            read.whole = True
            return read
        if not isinstance(data, list) or len(data) != 4 or not isinstance(data[3], dict):
            raise ValueError(f"not a read: {data!r}")
        read.size, read.index = bool(data[0]), bool(data[1])
        read.each = None if data[2] is None else cls.from_json(data[2])
        read.fields = {str(name): cls.from_json(item) for name, item in data[3].items()}
        return read

    def shape(self) -> object:
        """A hashable, comparable description of this read (tests; sharing equal reads)."""
        if self.whole:
            return "whole"
        fields = tuple((name, read.shape()) for name, read in sorted(self.fields.items()))
        each = None if self.each is None else self.each.shape()
        return (self.size, self.index, each, fields)


@dataclass(frozen=True)
class ListOf:
    """A list whose elements come from `elements` (a list literal, a concatenation)."""

    elements: frozenset[Origin]


@dataclass(frozen=True)
class Text:
    """Exactly this constant string."""

    value: str


@dataclass(frozen=True)
class Number:
    """Exactly this constant integer."""

    value: int


class _Opaque:
    """A value no part of the pod can change beyond what is already read whole."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OPAQUE"


OPAQUE = _Opaque()
Origin = Read | ListOf | Text | Number | _Opaque
Value = frozenset[Origin]
_OPAQUE_VALUE: Value = frozenset({OPAQUE})

# The functions modelled below; any other reads its operands (and its receiver) whole.
_IDENTITY = frozenset({"dyn"})
_SIZE = "size"
_INDEX = "_[_]"
_IN = "@in"
_TERNARY = "_?_:_"
_PLUS = "_+_"


class UnsupportedError(Exception):
    """The tree holds something the analysis does not model."""


def reads(tree: Node) -> dict[str, Read] | None:
    """The reads of `object` and `oldObject` by `tree`, or None when it is not analysed."""
    roots = {name: Read() for name in ROOTS}
    try:
        _consume(_Analysis(roots).value(tree, {}))
    except UnsupportedError:
        return None
    return roots


class _Analysis:
    def __init__(self, roots: Mapping[str, Read]) -> None:
        self._roots = roots

    def value(self, node: Node, scope: Mapping[str, Value]) -> Value:
        if isinstance(node, Const):
            if isinstance(node.value, str):
                return frozenset({Text(node.value)})
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                return frozenset({Number(node.value)})
            return _OPAQUE_VALUE
        if isinstance(node, Ident):
            if node.name in scope:
                return scope[node.name]
            if node.name in self._roots:
                return frozenset({self._roots[node.name]})
            raise UnsupportedError(f"identifier {node.name}")
        if isinstance(node, Select):
            return _select(self.value(node.operand, scope), node.field, node.test_only)
        if isinstance(node, Call):
            return self._call(node, scope)
        if isinstance(node, CreateList):
            if node.optional_indices:
                raise UnsupportedError("optional list element")
            elements: set[Origin] = set()
            for element in node.elements:
                elements |= self.value(element, scope)
            return frozenset({ListOf(frozenset(elements))})
        if isinstance(node, CreateStruct):
            if node.message_name:
                raise UnsupportedError(f"message {node.message_name}")
            for key, item, optional in node.entries:
                if optional or isinstance(key, str):
                    raise UnsupportedError("optional or field entry in a map literal")
                _consume(self.value(key, scope))
                _consume(self.value(item, scope))
            return _OPAQUE_VALUE
        if isinstance(node, Comprehension):
            return self._comprehension(node, scope)
        raise UnsupportedError(f"node {node!r}")

    def _call(self, node: Call, scope: Mapping[str, Value]) -> Value:
        function, args = node.function, node.args
        if node.target is None and function in _IDENTITY and len(args) == 1:
            return self.value(args[0], scope)
        if node.target is None and function == _TERNARY and len(args) == 3:
            _consume(self.value(args[0], scope))
            return self.value(args[1], scope) | self.value(args[2], scope)
        if node.target is None and function == _PLUS and len(args) == 2:
            return _concatenation(self.value(args[0], scope), self.value(args[1], scope))
        if node.target is None and function == _INDEX and len(args) == 2:
            return _index(self.value(args[0], scope), self.value(args[1], scope))
        if node.target is None and function == _IN and len(args) == 2:
            _membership(self.value(args[0], scope), self.value(args[1], scope))
            return _OPAQUE_VALUE
        # size(v) and v.size(): the size of v only
        if node.target is None:
            sized = args[0] if len(args) == 1 else None
        else:
            sized = None if args else node.target
        if function == _SIZE and sized is not None:
            _size(self.value(sized, scope))
            return _OPAQUE_VALUE
        if node.target is not None:
            _consume(self.value(node.target, scope))
        for arg in args:
            _consume(self.value(arg, scope))
        return _OPAQUE_VALUE

    def _comprehension(self, node: Comprehension, scope: Mapping[str, Value]) -> Value:
        if node.iter_var2:
            raise UnsupportedError("two-variable comprehension")
        elements = _elements(self.value(node.iter_range, scope))
        accumulator = self.value(node.accu_init, scope)
        while True:  # the accumulator's origins grow to a fixed point (finitely many origins)
            inner = {**scope, node.iter_var: elements, node.accu_var: accumulator}
            _consume(self.value(node.loop_condition, inner))
            grown = accumulator | self.value(node.loop_step, inner)
            if grown == accumulator:
                break
            accumulator = grown
        return self.value(node.result, {**scope, node.accu_var: accumulator})


def _select(value: Value, field: str, test_only: bool) -> Value:
    selected: set[Origin] = set()
    for origin in value:
        if isinstance(origin, Read):
            child = origin.fields.setdefault(field, Read())
            if not test_only:
                selected.add(child)
        else:
            selected.add(OPAQUE)  # an error or a value of constants: the same for every pod
    return frozenset(selected) if selected and not test_only else _OPAQUE_VALUE


def _index(container: Value, key: Value) -> Value:
    """`container[key]`: by a constant string, as a select; by a constant number, an element (see
    `Read.index`); by anything else, reads both whole."""
    if key and all(isinstance(origin, Number) for origin in key):
        found: set[Origin] = set()
        for origin in container:
            if isinstance(origin, Read):
                origin.index = True
            found |= _elements(frozenset({origin}))
        return frozenset(found)
    names = _constant_strings(key)
    if names is None:
        _consume(container)
        _consume(key)
        return _OPAQUE_VALUE
    selected: set[Origin] = set()
    for name in names:
        selected |= _select(container, name, test_only=False)
    return frozenset(selected) or _OPAQUE_VALUE


def _membership(element: Value, container: Value) -> None:
    """`element in container`: a constant string in a map is a key test (a list is read whole
    where it is found under a key test: see `verdict_memo`); anything else reads both whole."""
    names = _constant_strings(element)
    if names is None:
        _consume(element)
        _consume(container)
        return
    for origin in container:
        if isinstance(origin, Read):
            for name in names:
                origin.fields.setdefault(name, Read())
        elif isinstance(origin, ListOf):
            _consume(origin.elements)


def _concatenation(left: Value, right: Value) -> Value:
    """`left + right`: a list's elements, a string's characters come from both sides; a known
    constant string no longer is one."""
    joined: set[Origin] = set()
    for origin in left | right:
        joined.add(origin if isinstance(origin, Read | ListOf) else OPAQUE)  # not the constant
    return frozenset(joined)


def _elements(value: Value) -> Value:
    """What a comprehension's variable can be when it iterates over `value`."""
    elements: set[Origin] = set()
    for origin in value:
        if isinstance(origin, Read):
            if origin.each is None:
                origin.each = Read()
            elements.add(origin.each)
        elif isinstance(origin, ListOf):
            elements |= origin.elements
        else:
            elements.add(OPAQUE)
    return frozenset(elements) or _OPAQUE_VALUE


def _size(value: Value) -> None:
    for origin in value:
        if isinstance(origin, Read):
            origin.size = True


def _consume(value: Value) -> None:
    for origin in value:
        if isinstance(origin, Read):
            origin.whole = True
        elif isinstance(origin, ListOf):
            _consume(origin.elements)


def _constant_strings(value: Value) -> frozenset[str] | None:
    """The strings `value` can be, when it can only be known constant strings."""
    if value and all(isinstance(origin, Text) for origin in value):
        return frozenset(origin.value for origin in value if isinstance(origin, Text))
    return None
