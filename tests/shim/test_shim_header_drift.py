"""Signature drift: the shim and the fake driver compile against NVIDIA's own cuda.h and nvml.h
(from an installed CUDA toolkit, or the `nvidia-cuda-runtime-cu12` and `nvidia-nvml-dev-cu12`
wheels of the test extra), so a changed prototype fails the build."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path

import pytest
from fakegpu import FAKE_DIR, SHIM_DIR, compiler


def _toolkit_include(header: str) -> Path | None:
    folders = sorted(glob.glob("/usr/local/cuda*/include"), reverse=True) + ["/usr/include"]
    try:
        import nvidia  # the test extra's wheels: nvidia/nvml_dev (nvml.h), nvidia/cuda_runtime (cuda.h)

        for root in nvidia.__path__:
            folders += [
                str(Path(root) / wheel / "include") for wheel in ("nvml_dev", "cuda_runtime")
            ]
    except ImportError:
        pass
    for folder in folders:
        if (Path(folder) / header).is_file():
            return Path(folder)
    return None


def _compile(sources: list[Path], defines: list[str], include: Path, tmp_path: Path) -> None:
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
        f"-I{include}",
        "-o",
        str(out),
        *map(str, sources),
        "-ldl",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_shim_and_fake_driver_match_the_toolkits_cuda_h(tmp_path: Path) -> None:
    include = _toolkit_include("cuda.h")
    if include is None:
        pytest.skip(
            "no cuda.h (CUDA toolkit or the nvidia-cuda-runtime-cu12 wheel): nothing to compare against"
        )
    _compile(
        [SHIM_DIR / "shim.c", SHIM_DIR / "limits.c"], ["-DSECUREML_REAL_CUDA_H"], include, tmp_path
    )
    _compile(
        [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"],
        ["-DSECUREML_REAL_CUDA_H"],
        include,
        tmp_path,
    )


def test_shim_and_fake_nvml_match_the_toolkits_nvml_h(tmp_path: Path) -> None:
    include = _toolkit_include("nvml.h")
    if include is None:
        pytest.skip(
            "no nvml.h (CUDA toolkit or the nvidia-nvml-dev-cu12 wheel): nothing to compare against"
        )
    cuda = _toolkit_include("cuda.h")
    defines = ["-DSECUREML_REAL_NVML_H"] + (["-DSECUREML_REAL_CUDA_H", f"-I{cuda}"] if cuda else [])
    _compile([SHIM_DIR / "shim.c", SHIM_DIR / "limits.c"], defines, include, tmp_path)
    _compile(
        [FAKE_DIR / "fake_nvml.c", FAKE_DIR / "fake_common.c"],
        ["-DSECUREML_REAL_NVML_H"],
        include,
        tmp_path,
    )
