"""Preflight through NVML: the launcher, in its own process, on a fake GPU described per test.

Each mismatch between the request and the visible devices, and each health problem, stops the step
with exit 72 before its command runs. The fake NVML (tests/support/fakegpu.py) is the real pynvml's
counterpart: these are pynvml calls against a C library, nothing in Python is replaced.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from tests.support.fakegpu import FakeDevice, FakeGPU, FakeMig, FakeProcess, MiB

from .conftest import Launch, LaunchResult

MakeGPU = Callable[..., FakeGPU]
GB = 10**9
H100 = "NVIDIA H100 80GB HBM3"


def _mig(profile: str = "1g.10gb", memory: int = 9984 * MiB) -> FakeMig:
    return FakeMig(profile=profile, memory=memory)


def _run(
    launch: Launch,
    gpu: FakeGPU,
    request: dict[str, object],
    isolation: str,
    tmp_path: Path,
    **env: str,
) -> tuple[LaunchResult, Path]:
    marker = tmp_path / "step-ran"
    result = launch(
        [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        {contract.ENV_ISOLATION: isolation, contract.ENV_GPU_REQUEST: json.dumps(request), **env},
        gpu=gpu,
    )
    return result, marker


def _assert_stopped(result: LaunchResult, marker: Path, *fragments: str) -> None:
    assert result.returncode == ExitCode.PREFLIGHT, result.stderr
    assert not marker.exists(), "the step ran although preflight failed"
    error = result.stage("preflight")["error"]
    for fragment in fragments:
        assert fragment in error, error
    assert result.stage("run")["status"] == "skipped"
    assert result.record["exit_code"] == ExitCode.PREFLIGHT


def test_mig_instance_of_the_requested_profile_passes(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    mig = _mig()
    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100, mig_mode=True, migs=[mig, _mig("3g.40gb", 40 * GB)])],
        driver_version="560.35.03",
        cuda_version=12060,
    )
    result, marker = _run(
        launch,
        gpu,
        {"kind": "mig", "profile": "1g.10gb", "count": 1},
        "mig",
        tmp_path,
        CUDA_VISIBLE_DEVICES=mig.uuid,
    )

    assert result.returncode == 0, result.stderr
    assert marker.exists()
    found = result.record["gpu"]
    assert (found["driver_version"], found["cuda_version"]) == ("560.35.03", "12.6")
    (device,) = found["devices"]
    assert (device["uuid"], device["mig_profile"], device["memory_total"]) == (
        mig.uuid,
        "1g.10gb",
        9984 * MiB,
    )
    assert device["parent_uuid"] == gpu.devices[0].uuid
    assert found["health"][gpu.devices[0].uuid]["xid"] is None


def test_mig_profile_mismatch(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    mig = _mig("2g.20gb", 19968 * MiB)
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100, mig_mode=True, migs=[mig])])
    result, marker = _run(
        launch, gpu, {"kind": "mig", "profile": "1g.10gb", "count": 1}, "mig", tmp_path
    )
    _assert_stopped(result, marker, "profile 2g.20gb", "requested 1g.10gb", mig.uuid)


def test_mig_count_mismatch(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100, mig_mode=True, migs=[_mig(), _mig()])])
    result, marker = _run(
        launch, gpu, {"kind": "mig", "profile": "1g.10gb", "count": 1}, "mig", tmp_path
    )
    _assert_stopped(result, marker, "2 MIG instance(s) visible", "requested 1")


def test_mig_memory_that_does_not_match_the_profile(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100, mig_mode=True, migs=[_mig(memory=5 * GB)])])
    result, marker = _run(
        launch, gpu, {"kind": "mig", "profile": "1g.10gb", "count": 1}, "mig", tmp_path
    )
    _assert_stopped(result, marker, f"{5 * GB} bytes", "1g.10gb")


def test_mig_request_on_a_gpu_without_mig(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100)])
    result, marker = _run(
        launch, gpu, {"kind": "mig", "profile": "1g.10gb", "count": 1}, "mig", tmp_path
    )
    _assert_stopped(result, marker, "0 MIG instance(s) visible")


def test_whole_gpus_of_the_requested_product_pass(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100), FakeDevice(name=H100)])
    result, marker = _run(
        launch,
        gpu,
        {"kind": "whole", "count": 2, "product": "NVIDIA-H100-80GB-HBM3"},
        "dedicated",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert [d["uuid"] for d in result.record["gpu"]["devices"]] == [d.uuid for d in gpu.devices]


def test_whole_gpu_count_mismatch(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(), FakeDevice()])
    result, marker = _run(
        launch, gpu, {"kind": "whole", "count": 1, "product": None}, "dedicated", tmp_path
    )
    _assert_stopped(result, marker, "2 GPU(s) visible", "1 whole GPU(s)")


def test_cuda_visible_devices_narrows_what_the_step_sees(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(), FakeDevice()])
    result, _ = _run(
        launch,
        gpu,
        {"kind": "whole", "count": 1, "product": None},
        "dedicated",
        tmp_path,
        CUDA_VISIBLE_DEVICES=gpu.devices[1].uuid,
    )
    assert result.returncode == 0, result.stderr
    assert [d["uuid"] for d in result.record["gpu"]["devices"]] == [gpu.devices[1].uuid]


def test_whole_gpu_product_mismatch(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name="NVIDIA A100-SXM4-80GB")])
    result, marker = _run(
        launch,
        gpu,
        {"kind": "whole", "count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
        "dedicated",
        tmp_path,
    )
    _assert_stopped(result, marker, "NVIDIA A100-SXM4-80GB", "requested NVIDIA-H100-80GB-HBM3")


def test_whole_gpu_in_mig_mode(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100, mig_mode=True, migs=[_mig()])])
    result, marker = _run(
        launch, gpu, {"kind": "whole", "count": 1, "product": None}, "dedicated", tmp_path
    )
    _assert_stopped(result, marker, "MIG mode")


def test_foreign_process_on_a_dedicated_gpu(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice()], processes=[FakeProcess(pid=4242, used=8 * MiB)])
    result, marker = _run(
        launch, gpu, {"kind": "whole", "count": 1, "product": None}, "dedicated", tmp_path
    )
    _assert_stopped(result, marker, "pid 4242", "dedicated")


def test_other_processes_are_expected_on_a_time_sliced_gpu(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice()], processes=[FakeProcess(pid=4242, used=8 * MiB)])
    result, marker = _run(
        launch, gpu, {"kind": "timeslice", "memory": 64 * MiB, "compute": 25}, "timeslice", tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert marker.exists()


def test_time_sliced_share_larger_than_the_device(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=256 * MiB)])
    result, marker = _run(
        launch,
        gpu,
        {"kind": "timeslice", "memory": 512 * MiB, "compute": 25},
        "timeslice",
        tmp_path,
    )
    _assert_stopped(result, marker, "less than the step's share")


def test_time_sliced_step_seeing_two_devices(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(), FakeDevice()])
    result, marker = _run(
        launch, gpu, {"kind": "timeslice", "memory": 64 * MiB, "compute": 25}, "timeslice", tmp_path
    )
    _assert_stopped(result, marker, "2 GPU device(s) visible", "exactly one")


@pytest.mark.parametrize(
    ("health", "fragment"),
    [
        ({"retired_pages_pending": True}, "retired memory pages pending"),
        ({"remapped_rows_pending": True}, "row remapping is pending"),
        ({"remapped_rows_failure": True}, "row remapping failed"),
        ({"xids": [79]}, "critical XID error 79"),
    ],
)
def test_unhealthy_gpu(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path, health: dict[str, object], fragment: str
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(**health)])  # type: ignore[arg-type]
    result, marker = _run(
        launch, gpu, {"kind": "whole", "count": 1, "product": None}, "dedicated", tmp_path
    )
    _assert_stopped(result, marker, fragment, gpu.devices[0].uuid)


def test_nvml_that_does_not_start(launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path) -> None:
    gpu = make_fake_gpu(fail_nvmlinit=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    result, marker = _run(
        launch, gpu, {"kind": "whole", "count": 1, "product": None}, "dedicated", tmp_path
    )
    _assert_stopped(result, marker, "NVML did not start")
