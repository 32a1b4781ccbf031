"""Fixtures shared by the whole suite: the fake GPU (tests/fakegpu.py).

`fake_gpu` is one fake A100 with 256 MiB of device memory. With SECUREML_TEST_REAL_GPU=1 on a
machine where `nvidia-smi` lists a GPU it is the real driver instead (`RealGPU`, `.is_fake` False),
so tests that only use `.env()` run unchanged against real hardware.

`make_fake_gpu(**options)` builds a fake with any configuration (`FakeGPU` keyword arguments); each
call gets its own folder, so its device memory and allocations are its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakegpu import FakeGPU, RealGPU, compiler, real_gpu_available


def _require_compiler() -> None:
    if compiler() is None:
        pytest.skip("no C compiler: the fake GPU driver is built from C sources by the tests")


@pytest.fixture
def fake_gpu(tmp_path: Path) -> FakeGPU | RealGPU:
    if os.environ.get("SECUREML_TEST_REAL_GPU") == "1" and real_gpu_available():
        return RealGPU()
    _require_compiler()
    return FakeGPU(tmp_path / "fakegpu")


@pytest.fixture
def make_fake_gpu(tmp_path: Path) -> Callable[..., FakeGPU]:
    _require_compiler()
    count = 0

    def make(**options: object) -> FakeGPU:
        nonlocal count
        count += 1
        return FakeGPU(tmp_path / f"fakegpu{count}", **options)  # type: ignore[arg-type]

    return make
