"""TimeSlice memory needs a unit and at least 1Mi (issue 12 item 4): `memory=8` meant 8 bytes and
compiled; the decorator refuses it naming the component and the field, and the compile table shows
the memory a time slice gets."""

from typing import Any

import pytest
from kfp import dsl

from secureml import TimeSlice, secure_component
from secureml.compile.compiler import compile_pipeline
from secureml.compile.report import render_text
from secureml.core.errors import SecuremlError
from tests.support.compiled import IMAGE
from tests.support.profiles import make_profile


def _decorate(memory: Any) -> None:
    @secure_component(image=IMAGE, gpu=TimeSlice(memory=memory, compute=25))
    def tune(x: float) -> float:
        return x


@pytest.mark.parametrize(
    ("memory", "fragment", "suggestion"),
    [
        (8, "memory=8 has no unit", "'8Gi'"),
        ("8", "memory=8 has no unit", "'8Gi'"),
        (" 16 ", "memory=16 has no unit", "'16Gi'"),
        (8 * 2**30, "memory=8589934592 has no unit", "'8Gi'"),
        ("512Ki", "memory=512Ki is 524288 bytes, less than 1Mi", "'8Gi'"),
        ("1000k", "less than 1Mi", "'8Gi'"),
    ],
)
def test_a_memory_without_unit_or_below_1mi_is_refused_naming_component_and_field(
    memory: Any, fragment: str, suggestion: str
) -> None:
    with pytest.raises(SecuremlError) as caught:
        _decorate(memory)
    err = caught.value
    assert fragment in err.what and "TimeSlice" in err.what
    assert "'tune'" in err.where  # the component
    assert suggestion in err.fix


@pytest.mark.parametrize("memory", ["1Mi", "8Gi", "500M", "1048576k"])
def test_memories_with_a_unit_from_1mi_are_accepted(memory: str) -> None:
    _decorate(memory)


@secure_component(image=IMAGE, gpu=TimeSlice(memory="6Gi", compute=20))
def shared_step(x: float) -> float:
    return x


@dsl.pipeline(name="sliced")
def sliced(x: float = 1.0) -> None:
    shared_step(x=x)


def test_the_compile_table_shows_the_memory_of_a_time_slice() -> None:
    table = render_text(compile_pipeline(sliced, make_profile()).report())
    (row,) = [line for line in table.splitlines() if line.startswith("shared-step")]
    assert "time-slice 6Gi/20%" in row
