"""Signature drift: the shim and the fake driver compile against NVIDIA's own cuda.h and nvml.h of
CUDA 12 and of CUDA 13 (a toolkit's, or the test extra's wheels: tests/shim/cuda_wheels.py), so a
changed prototype fails the build."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from secureml.enforcement.shim_control import SOURCES
from tests.support.fakegpu import FAKE_DIR, SHIM_DIR, compiler

from .cuda_wheels import MAJORS, WHEEL, include_dir


def _include(header: str, major: int) -> Path:
    folder = include_dir(header, major)
    if folder is None:
        pytest.skip(f"no {header} of CUDA {major}: install the test extra ({WHEEL[major]})")
    return folder


def _compile(sources: list[Path], defines: list[str], includes: list[Path], tmp_path: Path) -> None:
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path / "drift.so"
    cmd = [
        cc,
        "-std=c11",
        "-shared",
        "-fPIC",
        "-pthread",
        "-Wall",
        "-Werror",
        *defines,
        *(f"-I{folder}" for folder in includes),
        "-o",
        str(out),
        *map(str, sources),
        "-ldl",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("major", MAJORS)
def test_shim_and_fake_driver_match_nvidias_cuda_h(major: int, tmp_path: Path) -> None:
    include = _include("cuda.h", major)
    shim = [SHIM_DIR / name for name in SOURCES]
    _compile(shim, ["-DSECUREML_REAL_CUDA_H"], [include], tmp_path)
    fake = [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"]
    _compile(fake, ["-DSECUREML_REAL_CUDA_H"], [include], tmp_path)


@pytest.mark.parametrize("major", MAJORS)
def test_shim_and_fake_nvml_match_nvidias_nvml_h(major: int, tmp_path: Path) -> None:
    include, cuda = _include("nvml.h", major), _include("cuda.h", major)
    defines = ["-DSECUREML_REAL_NVML_H", "-DSECUREML_REAL_CUDA_H"]
    shim = [SHIM_DIR / name for name in SOURCES]
    _compile(shim, defines, [include, cuda], tmp_path)
    fake = [FAKE_DIR / "fake_nvml.c", FAKE_DIR / "fake_nvml_events.c", FAKE_DIR / "fake_common.c"]
    _compile(fake, ["-DSECUREML_REAL_NVML_H"], [include], tmp_path)
