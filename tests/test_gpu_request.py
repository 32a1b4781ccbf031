"""secureml.gpu.request: the one GPU request value, its JSON both ways and the admission pattern."""

import json
import re

import pytest

from secureml.gpu.request import (
    MIG,
    GPURequestError,
    TimeSlice,
    WholeGPU,
    decode_gpu_request,
    wire_pattern,
)

REQUESTS = [
    MIG("1g.10gb"),
    MIG("3g.40gb", count=2),
    TimeSlice(memory="8Gi", compute=25),
    WholeGPU(2, product="NVIDIA-H100-80GB-HBM3"),
    WholeGPU(1),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: r.describe())
def test_what_to_json_writes_decodes_to_the_same_value(
    request_: MIG | TimeSlice | WholeGPU,
) -> None:
    text = request_.to_json()
    assert decode_gpu_request(text, where="t") == request_
    assert json.loads(text) == request_.to_dict()


def test_describe_is_what_reports_show() -> None:
    assert [r.describe() for r in REQUESTS] == [
        "MIG 1g.10gb x1",
        "MIG 3g.40gb x2",
        "time-slice 8Gi/25%",
        "whole x2 (NVIDIA-H100-80GB-HBM3)",
        "whole x1",
    ]


def test_the_admission_pattern_matches_exactly_the_compilers_json() -> None:
    pattern = re.compile(wire_pattern("timeslice", memory="[0-9]+", compute="[0-9]+"))
    assert pattern.match(TimeSlice(memory="8Gi", compute=25).to_json())
    for other in (
        '{"kind":"timeslice","compute":25,"memory":8589934592}',  # another member order
        '{"kind":"timeslice","memory":8589934592,"compute":25,"memory":1}',  # a repeated member
        '{"kind": "timeslice", "memory": 8589934592, "compute": 25}',  # another spacing
    ):
        assert not pattern.match(other), other
    with pytest.raises(ValueError):
        wire_pattern("timeslice", memory="[0-9]+")


def test_a_reader_refuses_what_the_compiler_never_writes() -> None:
    for text in (
        '{"kind":"mig","profile":"1g.10gb","extra":1}',
        '{"kind":"timeslice","compute":5}',
    ):
        with pytest.raises(GPURequestError):
            decode_gpu_request(text, where="t")
