"""`secureml._kfp.proto_dict.message_dict` writes what `json_format.MessageToDict` writes, or raises
what it raises: on kfp's specs of compiled pipelines and on a message type with every kind of
field, map and well-known type."""

import math
from typing import Any

import pytest
from google.protobuf import (  # (the well-known types' files loaded, for the test proto)
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message import Message
from kfp import dsl, kubernetes

from secureml._kfp.proto_dict import message_dict
from tests.support.paths import REFERENCE_PIPELINES
from tests.support.profiles import EXAMPLE_PROFILES, example_profile

_F = descriptor_pb2.FieldDescriptorProto


def _every_kind() -> type[Message]:
    """A proto3 message type with a field of each kind the proto3 JSON mapping writes apart."""
    file = descriptor_pb2.FileDescriptorProto(
        name="secureml_test/proto_dict.proto",
        package="secureml_test",
        syntax="proto3",
        dependency=[
            "google/protobuf/struct.proto",
            "google/protobuf/timestamp.proto",
            "google/protobuf/wrappers.proto",
            "google/protobuf/any.proto",
        ],
    )
    file.enum_type.add(name="Colour").value.extend(
        [
            descriptor_pb2.EnumValueDescriptorProto(name="COLOUR_UNSET", number=0),
            descriptor_pb2.EnumValueDescriptorProto(name="RED", number=1),
        ]
    )
    message = file.message_type.add(name="Every")
    fields = [
        ("i64", _F.TYPE_INT64, None),
        ("u64", _F.TYPE_UINT64, None),
        ("i32", _F.TYPE_INT32, None),
        ("u32", _F.TYPE_UINT32, None),
        ("dbl", _F.TYPE_DOUBLE, None),
        ("flt", _F.TYPE_FLOAT, None),
        ("raw", _F.TYPE_BYTES, None),
        ("flag", _F.TYPE_BOOL, None),
        ("text_value", _F.TYPE_STRING, None),
        ("colour", _F.TYPE_ENUM, ".secureml_test.Colour"),
        ("child", _F.TYPE_MESSAGE, ".secureml_test.Every"),
        ("struct", _F.TYPE_MESSAGE, ".google.protobuf.Struct"),
        ("value", _F.TYPE_MESSAGE, ".google.protobuf.Value"),
        ("list", _F.TYPE_MESSAGE, ".google.protobuf.ListValue"),
        ("when", _F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
        ("wrapped", _F.TYPE_MESSAGE, ".google.protobuf.Int64Value"),
        ("packed", _F.TYPE_MESSAGE, ".google.protobuf.Any"),
    ]
    for number, (name, kind, type_name) in enumerate(fields, start=1):
        field = message.field.add(name=name, number=number, type=kind, label=_F.LABEL_OPTIONAL)
        if type_name:
            field.type_name = type_name
    repeated = [
        ("many", _F.TYPE_INT64, None),
        ("children", _F.TYPE_MESSAGE, ".secureml_test.Every"),
    ]
    for number, (name, kind, type_name) in enumerate(repeated, start=len(fields) + 1):
        field = message.field.add(name=name, number=number, type=kind, label=_F.LABEL_REPEATED)
        if type_name:
            field.type_name = type_name
    maps = [
        ("by_number", _F.TYPE_INT32, _F.TYPE_STRING, None),
        ("by_flag", _F.TYPE_BOOL, _F.TYPE_MESSAGE, ".google.protobuf.Struct"),
        ("by_name", _F.TYPE_STRING, _F.TYPE_MESSAGE, ".secureml_test.Every"),
    ]
    for number, (name, key, value, type_name) in enumerate(maps, start=len(fields) + 3):
        entry_name = "".join(part.title() for part in name.split("_")) + "Entry"
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=key, label=_F.LABEL_OPTIONAL)
        value_field = entry.field.add(name="value", number=2, type=value, label=_F.LABEL_OPTIONAL)
        if type_name:
            value_field.type_name = type_name
        message.field.add(
            name=name,
            number=number,
            type=_F.TYPE_MESSAGE,
            label=_F.LABEL_REPEATED,
            type_name=f".secureml_test.Every.{entry_name}",
        )
    assert any_pb2 and wrappers_pb2  # their files are in the default pool
    pool = descriptor_pool.Default()
    try:
        found = pool.FindMessageTypeByName("secureml_test.Every")
    except KeyError:
        pool.Add(file)
        found = pool.FindMessageTypeByName("secureml_test.Every")
    return message_factory.GetMessageClass(found)


def _filled() -> Message:
    every = _every_kind()()
    every.i64, every.u64, every.i32, every.u32 = -(2**40), 2**63, -7, 7
    every.dbl, every.raw, every.flag, every.text_value = 0.1, b"\x00\xffbytes", True, "é\n"
    every.colour = 1
    every.child.i32 = 3
    every.child.child.text_value = "deep"
    every.struct.update({"a": None, "b": [1, "two", {"c": False}], "d": {}, "e": 2.5})
    every.value.list_value.extend([1.0, None, "x"])
    every.list.extend([True, {"k": "v"}])
    every.when.FromJsonString("2026-12-01T23:00:00Z")
    every.wrapped.value = 5
    every.packed.Pack(timestamp_pb2.Timestamp(seconds=1))
    every.many.extend([1, -2])
    every.children.add().i64 = 9
    every.by_number[-1] = "minus one"
    every.by_number[2] = ""
    every.by_flag[True].update({"t": 1})
    every.by_flag[False].update({})
    every.by_name["x"].flag = True
    every.by_name["y"].CopyFrom(every.child)
    return every


def test_every_kind_of_field_is_written_as_protobuf_writes_it() -> None:
    every = _filled()
    assert message_dict(every) == json_format.MessageToDict(every)
    assert message_dict(_every_kind()()) == {} == json_format.MessageToDict(_every_kind()())


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "dbl", math.inf),
        lambda m: setattr(m, "dbl", -math.inf),
        lambda m: setattr(m, "dbl", math.nan),
        lambda m: setattr(m, "flt", 0.1),  # a 32-bit float: left to protobuf
        lambda m: setattr(m, "colour", 7),  # an open enum's number it does not name
        lambda m: m.value.Clear(),  # a Value set but holding nothing
        lambda m: m.struct.fields["n"].Clear(),
    ],
)
def test_the_odd_values_too(change: Any) -> None:
    every = _filled()
    change(every)
    expected = json_format.MessageToDict(every)
    written = message_dict(every)
    assert json_format.json.dumps(written, sort_keys=True) == json_format.json.dumps(
        expected, sort_keys=True
    )  # (NaN != NaN: compared as text)


def test_what_protobuf_refuses_is_refused_with_its_error() -> None:
    value = struct_pb2.Value(number_value=math.inf)
    with pytest.raises(ValueError) as expected:
        json_format.MessageToDict(value)
    with pytest.raises(ValueError) as written:
        message_dict(value)
    assert str(written.value) == str(expected.value)


def _kubernetes_pipeline() -> Any:
    @dsl.component(base_image="python:3.11")
    def step(x: int) -> int:
        return x

    @dsl.pipeline(name="every-k8s-setting")
    def pipeline(x: int = 1) -> None:
        task = step(x=x)
        kubernetes.use_secret_as_env(task, "creds", {"user": "USER"})
        kubernetes.use_secret_as_volume(task, "creds", mount_path="/creds")
        kubernetes.mount_pvc(task, pvc_name="data", mount_path="/data")
        kubernetes.add_toleration(task, key="gpu", operator="Exists", effect="NoSchedule")
        kubernetes.add_node_selector(task, "pool", "gpu")
        kubernetes.set_image_pull_secrets(task, ["pull"])
        kubernetes.use_field_path_as_env(task, "POD", "metadata.name")
        kubernetes.empty_dir_mount(task, volume_name="scratch", mount_path="/scratch")
        kubernetes.add_pod_label(task, "team", "a")
        kubernetes.add_pod_annotation(task, "note", "n")
        kubernetes.set_timeout(task, 60)
        step(x=task.output).set_cpu_limit("1").set_memory_request("1Gi").set_retry(2)

    return pipeline


def _compiled_specs() -> list[Message]:
    from secureml.compile.compiler import CompileError, compile_pipeline
    from secureml.compile.pipeline_loader import load_pipeline

    specs: list[Message] = []
    plain = _kubernetes_pipeline()
    specs += [plain.pipeline_spec, plain.platform_spec]
    for name in EXAMPLE_PROFILES:
        for path in REFERENCE_PIPELINES:
            try:
                compiled = compile_pipeline(
                    load_pipeline(path), example_profile(name), check_admission=False
                )
            except CompileError:
                continue
            assert compiled.component is not None
            specs += [compiled.component.pipeline_spec, compiled.component.platform_spec]
    return specs


def test_kfps_specs_are_written_as_protobuf_writes_them() -> None:
    specs = _compiled_specs()
    assert len(specs) >= 4
    for spec in specs:
        assert message_dict(spec) == json_format.MessageToDict(spec)


def _strings(value: Any) -> list[str]:
    """Every string of a written message, keys and values, in order."""
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (key, *_strings(item))]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


def test_equal_texts_are_one_object() -> None:
    """The texts a spec repeats on every step (env names and values, the image, labels) are
    written once: a 500-step pipeline's documents held 60,000 strings, 2,100 of them distinct."""
    plain = _kubernetes_pipeline()
    for spec in (plain.pipeline_spec, plain.platform_spec):
        texts = _strings(message_dict(spec))
        distinct = {text: text for text in texts}
        assert len(texts) > len(distinct) > 5
        assert all(text is distinct[text] for text in texts)
    every = _filled()
    every.by_name["x"].text_value = "é\n"  # the same text as a field, a map entry, a Struct
    every.struct.update({"é\n": "é\n"})
    texts = [text for text in _strings(message_dict(every)) if text == "é\n"]
    assert len(texts) == 4 and all(text is texts[0] for text in texts)
