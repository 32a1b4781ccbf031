"""Fixtures of the shim tests: `make_step(memory=..., compute=..., scrub=...)` gives a Step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fakegpu import FakeDevice, FakeGPU, MiB, build_shim, compiler

from .shimstep import Step


@pytest.fixture
def make_step(tmp_path: Path) -> Iterator[Callable[..., Step]]:
    if compiler() is None:
        pytest.skip(
            "no C compiler: the shim and the fake driver are built from C sources by the tests"
        )
    shim = build_shim()
    steps: list[Step] = []

    def make(
        *,
        device_memory: int = 64 * MiB,
        devices: int = 1,
        gpu_options: dict | None = None,
        gpu: FakeGPU | None = None,
        **limits: object,
    ) -> Step:
        """A step on a fresh fake GPU, or on `gpu` (another tenant's step on the same device)."""
        index = len(steps)
        if gpu is None:
            fakes = [FakeDevice(memory=device_memory) for _ in range(devices)]
            gpu = FakeGPU(tmp_path / f"gpu{index}", fakes, **(gpu_options or {}))
        folder = tmp_path / f"step{index}"
        folder.mkdir()
        step = Step(gpu, folder, shim, **limits)  # type: ignore[arg-type]
        steps.append(step)
        return step

    yield make
    from secureml.enforcement.shim_control import remove_region

    for step in steps:
        remove_region(step.limits_file)
