"""`gpu.confidentialComputing: required`: the preflight verifies the CC state through NVML.

The launcher learns that CC is required from the pod's annotation (read-only podinfo files) or,
without them (a local run), from SECUREML_CONFIDENTIAL_COMPUTING; on the fake NVML
(`FakeConfidential`) each state that is not "on and ready" stops the step with exit 72 before its
command runs, and the audit record carries what NVML said.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.config import ConfigError, load_config
from secureml.enforcement.launch import ExitCode
from tests.support.fakegpu import FakeConfidential, FakeDevice, FakeGPU

from .conftest import Launch, LaunchResult
from .test_podinfo_settings import ANNOTATIONS, LABELS, _podinfo

MakeGPU = Callable[..., FakeGPU]
H100 = "NVIDIA H100 80GB HBM3"
WHOLE = {"kind": "whole", "count": 1, "product": None}


def _run(
    launch: Launch, gpu: FakeGPU, tmp_path: Path, required: bool = True
) -> tuple[LaunchResult, Path]:
    marker = tmp_path / "step-ran"
    env = {contract.ENV_ISOLATION: "dedicated", contract.ENV_GPU_REQUEST: json.dumps(WHOLE)}
    if required:
        env[contract.ENV_CONFIDENTIAL_COMPUTING] = "required"
    result = launch([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env, gpu=gpu)
    return result, marker


def test_cc_on_and_ready_passes_and_is_recorded(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100)],
        confidential=FakeConfidential(mode="on", ready=True, capable=True, cpu=3),
    )
    result, marker = _run(launch, gpu, tmp_path)
    assert result.returncode == 0, result.stderr
    assert marker.exists()
    cc = result.record["gpu"]["confidential_computing"]
    assert cc["required"] is True and cc["mode"] == "on" and cc["ready"] is True
    assert cc["cpu"] == "amd-sev-snp" and cc["environment"] == "production"
    assert result.record["controls"]["confidential_computing"] is True


@pytest.mark.parametrize(
    ("state", "seen"),
    [
        (FakeConfidential(), "CC mode off"),
        (FakeConfidential(mode="devtools", ready=True, capable=True), "CC mode devtools"),
        (FakeConfidential(mode="on", ready=False, capable=True), "not ready"),
    ],
    ids=["off", "devtools", "not-ready"],
)
def test_cc_not_in_force_stops_the_step(
    launch: Launch,
    make_fake_gpu: MakeGPU,
    tmp_path: Path,
    state: FakeConfidential,
    seen: str,
) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name=H100)], confidential=state)
    result, marker = _run(launch, gpu, tmp_path)
    assert result.returncode == ExitCode.PREFLIGHT == 72, result.stderr
    assert not marker.exists(), "the step ran although CC was not in force"
    error = result.stage("preflight")["error"]
    assert "requires confidential computing" in error and seen in error, error
    assert "nvidia.com/cc.ready.state=true" in error


def test_not_required_runs_without_cc_and_says_so(
    launch: Launch, make_fake_gpu: MakeGPU, tmp_path: Path
) -> None:
    result, _ = _run(launch, make_fake_gpu(devices=[FakeDevice(name=H100)]), tmp_path, False)
    assert result.returncode == 0, result.stderr
    assert result.record["gpu"]["confidential_computing"] == {"required": False}


def test_the_pod_annotation_decides_where_podinfo_exists(tmp_path: Path) -> None:
    annotations = {**ANNOTATIONS, contract.ANNOTATION_CONFIDENTIAL_COMPUTING: "required"}
    podinfo = _podinfo(tmp_path, LABELS, annotations)
    assert load_config({}, podinfo_dir=podinfo).confidential_computing is True
    with pytest.raises(ConfigError, match="conflicts with the pod's annotation"):
        load_config({contract.ENV_CONFIDENTIAL_COMPUTING: "off"}, podinfo_dir=podinfo)
    (tmp_path / "plain").mkdir()
    plain = _podinfo(tmp_path / "plain", LABELS, ANNOTATIONS)
    with pytest.raises(ConfigError, match="has no annotation"):
        load_config({contract.ENV_CONFIDENTIAL_COMPUTING: "required"}, podinfo_dir=plain)
    assert load_config({}, podinfo_dir=plain).confidential_computing is False


def test_an_unknown_value_stops_the_launcher(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be required or off"):
        load_config({contract.ENV_CONFIDENTIAL_COMPUTING: "yes"}, podinfo_dir=tmp_path / "none")
