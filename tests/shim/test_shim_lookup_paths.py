"""Every look-up path to the driver's allocator returns the shim's hook, so each is refused over the
quota: the linked call, cuGetProcAddress and cuGetProcAddress_v2 for CUDA 11.0 to 13.2 (both stream
flavours), dlsym on the driver's handle / RTLD_DEFAULT / RTLD_NEXT, dlvsym with any version string,
libc's dlsym or dlvsym fetched through dlvsym or dlsym, cuGetProcAddress fetched through a look-up,
the driver opened with RTLD_DEEPBIND, and a library linked against the driver loaded with
RTLD_DEEPBIND (issue 13 item 7). The graph memory allocation node's entry points
(cuGraphAddMemAllocNode, and cuGraphAddNode with a memory allocation node) take the same paths and
are refused the same way (issue 13 item 3). A driver loaded into another link-map namespace with
dlmopen is refused."""

from __future__ import annotations

import json
import os
import subprocess

from tests.support.fakegpu import SHIM_DIR, MiB, build_native

from .shimstep import HERE


def test_every_lookup_path_is_refused_over_the_quota(make_step) -> None:
    step = make_step(memory=4 * MiB, gpu_options={"cuda_version": 13020})
    program = build_native(
        "lookup_paths",
        [HERE / "lookup_paths.c"],
        flags=(f"-I{SHIM_DIR}", f"-L{step.gpu.lib_dir}"),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1", "-ldl"),
    )
    deep = build_native(
        "libdeep_lib.so",
        [HERE / "deep_lib.c"],
        shared=True,
        flags=(f"-I{SHIM_DIR}", f"-L{step.gpu.lib_dir}"),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )
    result = subprocess.run(
        [str(program)],
        env=step.env(LOOKUP_PATHS_DEEP_LIB=str(deep)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["held"] == 4 * MiB
    paths = got["paths"]
    assert len(paths) == 93, sorted(paths)
    wrong = {path: rcs for path, rcs in paths.items() if rcs != [0, 2]}
    assert not wrong, wrong  # [0, 2]: allocates with room, CUDA_ERROR_OUT_OF_MEMORY over the quota
    assert got["dlmopen_new_namespace"] == "refused"
    # Without the shim the same paths reach the driver, which allocates far past 4 MiB.
    bare = subprocess.run(
        [str(program), "bare"],
        env=step.gpu.env({**os.environ, "LOOKUP_PATHS_DEEP_LIB": str(deep)}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode == 0, bare.stderr
    unlimited = json.loads(bare.stdout)
    assert unlimited["held"] > 4 * MiB and unlimited["dlmopen_new_namespace"] == "loaded"
    assert all(rcs[0] == 0 for rcs in unlimited["paths"].values())  # each path reaches the driver
