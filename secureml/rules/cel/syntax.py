"""The syntax tree of a compiled CEL expression, read from the C++ engine's own serialized form."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

# Field numbers of google/protobuf/any.proto, cel/expr/syntax.proto and checked.proto.
_ANY_TYPE_URL, _ANY_VALUE = 1, 2
_PARSED_EXPR_TYPE = b"type.googleapis.com/cel.expr.ParsedExpr"
_PARSED_EXPR = 2
_CHECKED_EXPR = 4
_EXPR_CONST, _EXPR_IDENT, _EXPR_SELECT, _EXPR_CALL = 3, 4, 5, 6
_EXPR_LIST, _EXPR_STRUCT, _EXPR_COMPREHENSION = 7, 8, 9


@dataclass(frozen=True)
class Const:
    value: object  # None, bool, int, float, str, bytes; `Unknown` for other constant kinds


@dataclass(frozen=True)
class Ident:
    name: str


@dataclass(frozen=True)
class Select:
    operand: Node
    field: str
    test_only: bool  # `has(operand.field)`


@dataclass(frozen=True)
class Call:
    target: Node | None  # the receiver of a member call (`x.startsWith(y)`)
    function: str  # `_&&_`, `_[_]`, `@in`, `size`, `startsWith`...
    args: tuple[Node, ...]


@dataclass(frozen=True)
class CreateList:
    elements: tuple[Node, ...]
    optional_indices: tuple[int, ...]


@dataclass(frozen=True)
class CreateStruct:
    message_name: str  # "" for a map literal
    entries: tuple[tuple[Node | str, Node, bool], ...]  # (map key or field name, value, optional)


@dataclass(frozen=True)
class Comprehension:
    iter_var: str
    iter_var2: str  # "" unless a two-variable comprehension
    iter_range: Node
    accu_var: str
    accu_init: Node
    loop_condition: Node
    loop_step: Node
    result: Node


@dataclass(frozen=True)
class Unknown:
    """A node or constant this reader does not model."""

    field: int


Node = Const | Ident | Select | Call | CreateList | CreateStruct | Comprehension | Unknown


def parse(serialized: bytes) -> Node:
    """The tree of a `cel_cpp` program's `serialize()` output."""
    checked = _last(_fields(serialized), _ANY_VALUE)
    if not isinstance(checked, bytes):
        raise ValueError("not a serialized CheckedExpr")
    expr = _last(_fields(checked), _CHECKED_EXPR)
    if not isinstance(expr, bytes):
        raise ValueError("a CheckedExpr without an expression")
    return _expr(expr)


def without_source_info(serialized: bytes) -> bytes:
    """A program's `serialize()` output for a parsed, unchecked expression (a `google.protobuf.Any`
    holding a `cel.expr.ParsedExpr`) with only its tree: the source info (each node's position in
    the text, and each macro's call as written) is dropped. Raises ValueError for anything else."""
    type_url = _last(_fields(serialized), _ANY_TYPE_URL)
    parsed = _last(_fields(serialized), _ANY_VALUE)
    if type_url != _PARSED_EXPR_TYPE or not isinstance(parsed, bytes):
        raise ValueError("not a serialized ParsedExpr")
    expr = _last(_fields(parsed), _PARSED_EXPR)
    if not isinstance(expr, bytes):
        raise ValueError("a ParsedExpr without an expression")
    return _delimited(_ANY_TYPE_URL, type_url) + _delimited(
        _ANY_VALUE, _delimited(_PARSED_EXPR, expr)
    )


def size(node: Node | None) -> int:
    """How many nodes `node` has (a measure of what evaluating it costs)."""
    if node is None or isinstance(node, Const | Ident | Unknown):
        return 0 if node is None else 1
    if isinstance(node, Select):
        return 1 + size(node.operand)
    if isinstance(node, Call):
        return 1 + size(node.target) + sum(size(arg) for arg in node.args)
    if isinstance(node, CreateList):
        return 1 + sum(size(element) for element in node.elements)
    if isinstance(node, CreateStruct):
        return 1 + sum(
            size(item) + (0 if isinstance(key, str) else size(key)) for key, item, _ in node.entries
        )
    parts = (node.iter_range, node.accu_init, node.loop_condition, node.loop_step, node.result)
    return 1 + sum(size(part) for part in parts)


def _expr(data: bytes) -> Node:
    for number, value in _fields(data):
        if number == 1 or number == 2:  # the node's id
            continue
        if not isinstance(value, bytes):
            return Unknown(number)
        if number == _EXPR_CONST:
            return _const(value)
        if number == _EXPR_IDENT:
            return Ident(_text(value, 1))
        if number == _EXPR_SELECT:
            return _select(value)
        if number == _EXPR_CALL:
            return _call(value)
        if number == _EXPR_LIST:
            return _list(value)
        if number == _EXPR_STRUCT:
            return _struct(value)
        if number == _EXPR_COMPREHENSION:
            return _comprehension(value)
        return Unknown(number)
    return Unknown(0)  # no kind set: an unset expression


def _select(data: bytes) -> Select:
    operand: Node = Unknown(0)
    field, test_only = "", False
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            operand = _expr(value)
        elif number == 2 and isinstance(value, bytes):
            field = value.decode()
        elif number == 3:
            test_only = bool(value)
    return Select(operand, field, test_only)


def _call(data: bytes) -> Call:
    target: Node | None = None
    function = ""
    args: list[Node] = []
    for number, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            target = _expr(value)
        elif number == 2:
            function = value.decode()
        elif number == 3:
            args.append(_expr(value))
    return Call(target, function, tuple(args))


def _list(data: bytes) -> CreateList:
    elements: list[Node] = []
    optional: list[int] = []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            elements.append(_expr(value))
        elif number == 2:
            optional.extend(_packed(value) if isinstance(value, bytes) else [int(value)])
    return CreateList(tuple(elements), tuple(optional))


def _struct(data: bytes) -> CreateStruct:
    name = ""
    entries: list[tuple[Node | str, Node, bool]] = []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            name = value.decode()
        elif number == 2 and isinstance(value, bytes):
            key: Node | str = Unknown(0)
            item: Node = Unknown(0)
            optional = False
            for entry_number, entry_value in _fields(value):
                if entry_number == 2 and isinstance(entry_value, bytes):
                    key = entry_value.decode()
                elif entry_number == 3 and isinstance(entry_value, bytes):
                    key = _expr(entry_value)
                elif entry_number == 4 and isinstance(entry_value, bytes):
                    item = _expr(entry_value)
                elif entry_number == 5:
                    optional = bool(entry_value)
            entries.append((key, item, optional))
    return CreateStruct(name, tuple(entries))


def _comprehension(data: bytes) -> Comprehension:
    parts: dict[int, bytes] = {}
    for number, value in _fields(data):
        if isinstance(value, bytes):
            parts[number] = value

    def node(number: int) -> Node:
        return _expr(parts[number]) if number in parts else Unknown(0)

    return Comprehension(
        iter_var=parts.get(1, b"").decode(),
        iter_var2=parts.get(8, b"").decode(),
        iter_range=node(2),
        accu_var=parts.get(3, b"").decode(),
        accu_init=node(4),
        loop_condition=node(5),
        loop_step=node(6),
        result=node(7),
    )


def _const(data: bytes) -> Const:
    for number, value in _fields(data):
        if number == 1:
            return Const(None)
        if number == 2:
            return Const(bool(value))
        if number == 3 and isinstance(value, int):
            return Const(value - (1 << 64) if value >= 1 << 63 else value)
        if number == 4 and isinstance(value, int):
            return Const(Unknown(4))  # uint: CEL's 1u is not Python's 1
        if number == 5 and isinstance(value, bytes):
            return Const(struct.unpack("<d", value)[0])
        if number == 6 and isinstance(value, bytes):
            return Const(value.decode())
        if number == 7 and isinstance(value, bytes):
            return Const(value)
        return Const(Unknown(number))
    return Const(Unknown(0))


def _text(data: bytes, wanted: int) -> str:
    value = _last(_fields(data), wanted)
    return value.decode() if isinstance(value, bytes) else ""


def _last(fields: Iterator[tuple[int, int | bytes]], wanted: int) -> int | bytes | None:
    found: int | bytes | None = None
    for number, value in fields:
        if number == wanted:
            found = value
    return found


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for a varint, bytes for anything else."""
    index, end = 0, len(data)
    while index < end:
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, index = _varint(data, index)
            yield number, value
        elif wire == 2:
            length, index = _varint(data, index)
            if index + length > end:
                raise ValueError("truncated field")
            yield number, data[index : index + length]
            index += length
        elif wire == 1:
            yield number, data[index : index + 8]
            index += 8
        elif wire == 5:
            yield number, data[index : index + 4]
            index += 4
        else:
            raise ValueError(f"wire type {wire} is not read here")
    if index != end:
        raise ValueError("truncated message")


def _packed(data: bytes) -> list[int]:
    values, index = [], 0
    while index < len(data):
        value, index = _varint(data, index)
        values.append(value)
    return values


def _delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited field, as protobuf writes it."""
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint(data: bytes, index: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if index >= len(data):
            raise ValueError("truncated varint")
        byte = data[index]
        index += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, index
