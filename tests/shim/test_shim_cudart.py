"""A real CUDA runtime program under the shim (issue 35): tests/shim/cudart_probe.c against NVIDIA's
libcudart of CUDA 12 and of CUDA 13 (the test extra's wheels, or a toolkit), linked dynamically and
statically (libcudart_static.a, which both wheels ship), over the fake driver.

The static runtime has no libcudart.so to interpose: it still opens the driver with dlopen and
fetches every entry point with cuGetProcAddress_v2, which it finds with dlsym, and those the shim
answers. Every entry point the runtime asked for that the shim hooks must come back hooked (the
shim's debug log marks each answer it replaced): nothing bypasses it. Over the fake the runtime then
stops at its own initialisation (the fake has no cuGetExportTable, whose private tables the runtime
needs), so no cudaMalloc reaches the driver here; scripts/gpu-check.sh runs the same program on a
real GPU, where its cudaMalloc loop must stop at the quota."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.fakegpu import MiB, build_native

from .cuda_wheels import MAJORS, WHEEL, runtime
from .shimstep import HERE

ANSWER = re.compile(r"cuGetProcAddress_v2\((\w+), (\d+), (\d+)\) = 0( \(hooked\))?$", re.M)
WANTED = [
    ("cuMemAlloc", "0"),
    ("cuMemFree", "0"),
    ("cuMemGetInfo", "0"),
    ("cuMemAllocAsync", "0"),
    ("cuMemAllocAsync", "2"),
    ("cuMemAllocPitch", "0"),
    ("cuMemAllocManaged", "0"),
    ("cuArrayCreate", "0"),
    ("cuLaunchKernel", "0"),
    ("cuLaunchKernel", "2"),
    ("cuGraphLaunch", "2"),
    ("cuIpcOpenMemHandle", "0"),
    ("cuGetProcAddress", "0"),
]


def _hooked_names(shim: Path) -> set[str]:
    """The base names of every driver entry point the shim exports (what cuGetProcAddress is asked)."""
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(shim)], capture_output=True, text=True, check=True
    ).stdout.split()
    return {re.sub(r"(_v\d)?(_ptsz|_ptds)?$", "", s) for s in symbols if s.startswith("cu")}


def _probe(major: int, linkage: str) -> Path:
    library = runtime(major)
    if library is None:
        pytest.skip(f"no libcudart.so.{major}: install the test extra ({WHEEL[major]})")
    folder = library.parent
    if linkage == "static":
        archive = folder / "libcudart_static.a"
        if not archive.is_file():
            pytest.skip(f"CUDA {major}'s runtime ships no libcudart_static.a")
        libs: tuple[str, ...] = (str(archive), "-ldl", "-lpthread", "-lrt")
    else:
        libs = (f"-L{folder}", f"-l:{library.name}", f"-Wl,-rpath,{folder}")
    return build_native(f"cudart_probe_{linkage}{major}", [HERE / "cudart_probe.c"], libs=libs)


@pytest.mark.parametrize("linkage", ["dynamic", "static"])
@pytest.mark.parametrize("major", MAJORS)
def test_the_cuda_runtime_reaches_the_driver_only_through_hooks(
    make_step, major: int, linkage: str
) -> None:
    probe = _probe(major, linkage)
    step = make_step(memory=4 * MiB, gpu_options={"cuda_version": major * 1000})
    result = subprocess.run(
        [str(probe), "fill", str(MiB)],
        env=step.env(SECUREML_SHIM_LOG_LEVEL="debug"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answers = ANSWER.findall(result.stderr)
    hooked = {(name, flags) for name, _, flags, mark in answers if mark}
    for wanted in WANTED:
        assert wanted in hooked, (wanted, result.stderr[-3000:])
    ours = _hooked_names(step.shim)
    bypass = sorted({name for name, _, _, mark in answers if not mark and name in ours})
    assert not bypass, f"entry points the runtime got past the shim: {bypass}"
    # The runtime stops before allocating over the fake (no cuGetExportTable): nothing was charged.
    fill = json.loads(result.stdout.strip().splitlines()[-1])
    assert fill["total"] == 0 and fill["rc"] != 0, fill
