"""`json_format.MessageToDict` (default options) of kfp's protos, faster: the same dict, written
by a plan made once per message type; what it does not write itself it leaves to `MessageToDict`
(`tests/test_proto_dict.py` compares both)."""

from __future__ import annotations

import base64
import math
import sys
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

Convert = Callable[[Any], Any]
# protobuf's descriptors (pure-Python or upb's, as the stubs have it): used by attribute only
Descriptor = Any

_INT64 = frozenset({FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64})
_LEFT_TO_PROTOBUF = frozenset(
    {
        "google.protobuf.Any",
        "google.protobuf.Duration",
        "google.protobuf.FieldMask",
        "google.protobuf.Timestamp",
    }
)

# Every text is written as one object per distinct text (`sys.intern`; Python frees an interned
# text like any other once nothing refers to it): the documents repeat a few hundred texts on every
# step (env names and values, images, labels, keys), and protobuf hands out each as a new object.
# A 500-step pipeline's documents held 60,000 strings, 2,100 of them distinct: 3.6 MiB less.
_text = sys.intern


class _NotWrittenHereError(Exception):
    """A value `message_dict` leaves to `MessageToDict` (see the module docstring)."""


def message_dict(message: Message) -> dict[str, Any]:
    """`json_format.MessageToDict(message)`: the same dict, or the same error."""
    try:
        written: dict[str, Any] = _message_converter(message.DESCRIPTOR)(message)
    except Exception:  # noqa: BLE001 - whatever it is, protobuf's own writer decides it
        return json_format.MessageToDict(message)
    return written


_PLANS: dict[Descriptor, dict[Any, tuple[str, Convert]]] = {}


def _plan(descriptor: Descriptor) -> dict[Any, tuple[str, Convert]]:
    """Each field of a message type: its JSON name and how its value is written."""
    plan = _PLANS.get(descriptor)
    if plan is None:
        plan = _PLANS[descriptor] = {
            field: (_text(field.json_name), _field_converter(field)) for field in descriptor.fields
        }
    return plan


def _message_converter(descriptor: Descriptor) -> Convert:
    name = descriptor.full_name
    if name == "google.protobuf.Struct":
        return _struct
    if name == "google.protobuf.Value":
        return _value
    if name == "google.protobuf.ListValue":
        return _list_value
    if name in _LEFT_TO_PROTOBUF or descriptor.file.name == "google/protobuf/wrappers.proto":
        return _by_protobuf
    return _message


def _by_protobuf(message: Message) -> Any:
    return json_format.MessageToDict(message)  # (looked up at each call, never kept)


def _message(message: Message) -> dict[str, Any]:
    plan = _plan(message.DESCRIPTOR)
    written = {}
    for field, value in message.ListFields():
        found = plan.get(field)
        if found is None:  # an extension
            raise _NotWrittenHereError(field.full_name)
        written[found[0]] = found[1](value)
    return written


def _field_converter(field: Descriptor) -> Convert:
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        return _map_converter(message_type)
    one = _single_converter(field)
    if field.is_repeated:
        return lambda values: [one(value) for value in values]
    return one


def _map_converter(entry: Descriptor) -> Convert:
    one = _single_converter(entry.fields_by_name["value"])
    if entry.fields_by_name["key"].cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return lambda mapping: {("true" if key else "false"): one(mapping[key]) for key in mapping}
    return lambda mapping: {_text(str(key)): one(mapping[key]) for key in mapping}


def _single_converter(field: Descriptor) -> Convert:
    kind = field.cpp_type
    if kind == FieldDescriptor.CPPTYPE_MESSAGE:
        return _message_converter(field.message_type)
    if kind == FieldDescriptor.CPPTYPE_ENUM:
        return _enum_converter(field)
    if kind == FieldDescriptor.CPPTYPE_STRING:
        if field.type == FieldDescriptor.TYPE_BYTES:
            return lambda value: base64.b64encode(value).decode("utf-8")
        return _text
    if kind == FieldDescriptor.CPPTYPE_BOOL:
        return bool
    if kind in _INT64:
        return str
    if kind == FieldDescriptor.CPPTYPE_DOUBLE:
        return _double
    if kind == FieldDescriptor.CPPTYPE_FLOAT:
        return _left_to_protobuf
    return _same  # 32-bit integers


def _enum_converter(field: Descriptor) -> Convert:
    enum = field.enum_type
    if enum.full_name == "google.protobuf.NullValue":
        return lambda value: None
    names = {number: _text(value.name) for number, value in enum.values_by_number.items()}
    closed = enum.is_closed

    def convert(value: int) -> Any:
        name = names.get(value)
        if name is not None:
            return name
        if closed:
            raise _NotWrittenHereError(enum.full_name)
        return value

    return convert


def _double(value: float) -> float | str:
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    if math.isnan(value):
        return "NaN"
    return value


def _same(value: Any) -> Any:
    return value


def _left_to_protobuf(value: Any) -> Any:
    raise _NotWrittenHereError(repr(value))


def _struct(struct: Any) -> dict[str, Any]:
    fields = struct.fields
    return {_text(key): _value(fields[key]) for key in fields}


def _list_value(values: Any) -> list[Any]:
    return [_value(value) for value in values.values]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return _text(value.string_value)
    if kind == "struct_value":
        return _struct(value.struct_value)
    if kind == "list_value":
        return _list_value(value.list_value)
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):
            raise _NotWrittenHereError(repr(number))  # protobuf refuses it: its error is shown
        return number
    return None  # null_value, or no kind set
