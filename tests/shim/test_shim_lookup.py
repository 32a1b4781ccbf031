"""Look-ups return the hooks: dlsym on any handle, and cuGetProcAddress(_v2) for the variant the
driver picks by version and stream flags. Calls through what a look-up returns are enforced."""

from __future__ import annotations

import textwrap

import pytest

from tests.support.fakegpu import MiB, build_native, run_python

from .cuda_wheels import MAJORS, WHEEL
from .cuda_wheels import runtime as cuda_runtime
from .shimstep import CUDA_PY, HERE

DLADDR = """
class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
libc = ctypes.CDLL(None)
def where(address):
    info = DlInfo()
    assert libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info))
    return [info.fname.decode().rsplit("/", 1)[-1], info.sname.decode() if info.sname else None]
def address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value
"""

HOOKED = [
    "cuMemAlloc_v2",
    "cuMemAllocPitch_v2",
    "cuMemAllocManaged",
    "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemCreate",
    "cuMemRelease",
    "cuArrayCreate_v2",
    "cuArray3DCreate_v2",
    "cuMipmappedArrayCreate",
    "cuArrayDestroy",
    "cuMipmappedArrayDestroy",
    "cuGraphAddMemAllocNode",
    "cuGraphAddNode",
    "cuGraphAddNode_v2",
    "cuGraphAddNode_v3",
    "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams",
    "cuGraphInstantiateWithParams_ptsz",
    "cuGraphInstantiate",
    "cuGraphInstantiate_v2",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuDeviceGraphMemTrim",
    "cuStreamEndCapture",
    "cuStreamEndCapture_ptsz",
    "cuMemGetInfo_v2",
    "cuDeviceTotalMem_v2",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
]


def test_dlsym_on_the_driver_handle_returns_the_hooks(make_step) -> None:
    step = make_step(memory=4 * MiB)
    got = step.python(
        CUDA_PY
        + DLADDR
        + textwrap.dedent(f"""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    hooked = {{name: where(address(getattr(cu, name))) for name in {HOOKED!r}}}
    hooked["nvmlDeviceGetMemoryInfo"] = where(address(nvml.nvmlDeviceGetMemoryInfo))
    hooked["nvmlDeviceGetMemoryInfo_v2"] = where(address(nvml.nvmlDeviceGetMemoryInfo_v2))
    plain = {{name: where(address(getattr(cu, name)))[0] for name in ("cuMemcpyHtoD_v2", "cuInit", "cuCtxGetDevice")}}
    print(json.dumps({{"hooked": hooked, "plain": plain}}))
    """)
    )
    for name, (library, symbol) in got["hooked"].items():
        assert library == step.shim.name and symbol == name, name
    assert set(got["plain"].values()) == {"libcuda.so.1"}


def test_cu_get_proc_address_honours_version_and_stream_flags(make_step) -> None:
    step = make_step(memory=4 * MiB)
    got = step.python(
        CUDA_PY
        + DLADDR
        + textwrap.dedent("""
    def proc(name, version=12040, flags=0, v2=True):
        fn = ctypes.c_void_p(); status = ctypes.c_int(-1)
        if v2:
            rc = cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(flags), ctypes.byref(status))
        else:
            rc = cu.cuGetProcAddress(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(flags))
        return [rc, where(fn.value) if fn.value else None, status.value]
    out = {
        "alloc": proc("cuMemAlloc"),
        "alloc_v1_api": proc("cuMemAlloc", v2=False),
        "launch": proc("cuLaunchKernel"),
        "launch_ptsz": proc("cuLaunchKernel", flags=2),
        "ex_ptsz": proc("cuLaunchKernelEx", flags=2),
        "graph_ptsz": proc("cuGraphLaunch", flags=2),
        "async_ptsz": proc("cuMemAllocAsync", flags=2),
        "too_old": proc("cuMemAllocAsync", version=11000),
        "self": proc("cuGetProcAddress"),
        "copy": proc("cuMemcpyHtoD"),
        "info": proc("cuMemGetInfo"),
    }
    # A call through the looked-up pointer is enforced like a direct call.
    fn = ctypes.c_void_p(); status = ctypes.c_int()
    cu.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(fn), 12040, ctypes.c_uint64(0), ctypes.byref(status))
    looked_up = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(fn.value)
    p = ctypes.c_uint64()
    out["within"] = looked_up(ctypes.byref(p), 3 << 20)
    out["above"] = looked_up(ctypes.byref(p), 3 << 20)
    print(json.dumps(out))
    """)
    )
    shim = step.shim.name
    assert got["alloc"] == [0, [shim, "cuMemAlloc_v2"], 0]
    assert got["alloc_v1_api"] == [0, [shim, "cuMemAlloc_v2"], -1]
    assert got["launch"] == [0, [shim, "cuLaunchKernel"], 0]
    assert got["launch_ptsz"] == [0, [shim, "cuLaunchKernel_ptsz"], 0]
    assert got["ex_ptsz"][1] == [shim, "cuLaunchKernelEx_ptsz"]
    assert got["graph_ptsz"][1] == [shim, "cuGraphLaunch_ptsz"]
    assert got["async_ptsz"][1] == [shim, "cuMemAllocAsync_ptsz"]
    assert got["too_old"] == [500, None, 2]  # the driver's answer passes through
    assert got["self"][1] == [shim, "cuGetProcAddress_v2"]
    assert got["copy"][1] == ["libcuda.so.1", "cuMemcpyHtoD_v2"]
    assert got["info"][1] == [shim, "cuMemGetInfo_v2"]
    assert got["within"] == 0 and got["above"] == 2


def test_rtld_next_still_means_after_the_caller(make_step) -> None:
    step = make_step(memory=4 * MiB)
    probe = build_native("libnext_probe.so", [HERE / "next_probe.c"], shared=True, libs=("-ldl",))
    got = step.python(
        "import ctypes, json, os\n"
        "probe = ctypes.CDLL(None)  # the preloaded probe is in the global scope\n"
        "print(json.dumps([probe.probe_next_is_self(), os.getppid() > 0]))",
        LD_PRELOAD=f"{step.shim}:{probe}",
    )
    assert got == [0, True]


@pytest.mark.parametrize("major", MAJORS)
def test_the_cuda_runtimes_own_look_ups_receive_the_hooks(make_step, major: int) -> None:
    """NVIDIA's libcudart of CUDA 12 and of CUDA 13 (a toolkit's, or the test extra's wheels)
    fetches driver entry points through dlsym + cuGetProcAddress_v2; the shim's debug log shows each
    answer it replaced with a hook. (The fake driver lacks the runtime's private tables, so the
    runtime goes no further.)"""
    import re

    runtime = cuda_runtime(major)
    if runtime is None:
        pytest.skip(f"no libcudart.so.{major}: install the test extra ({WHEEL[major]})")
    step = make_step(memory=4 * MiB, gpu_options={"cuda_version": major * 1000})
    result = run_python(
        f"import ctypes; rt = ctypes.CDLL({str(runtime)!r}); n = ctypes.c_int(); rt.cudaGetDeviceCount(ctypes.byref(n))",
        step.env(SECUREML_SHIM_LOG_LEVEL="debug"),
    )
    assert result.returncode == 0, result.stderr
    hooked = set(
        re.findall(r"cuGetProcAddress_v2\((\w+), \d+, (\d)\) = 0 \(hooked\)", result.stderr)
    )
    for wanted in [
        ("cuMemAlloc", "0"),
        ("cuMemFree", "0"),
        ("cuMemGetInfo", "0"),
        ("cuLaunchKernel", "0"),
        ("cuLaunchKernel", "2"),
        ("cuMemAllocAsync", "2"),
        ("cuGraphLaunch", "2"),
        ("cuGetProcAddress", "0"),
    ]:
        assert wanted in hooked, (wanted, result.stderr[-3000:])
