"""Memory limits: refusal above the quota, virtualised memory reports, scrub on free, fail-closed
configuration, and no environment switch that loosens any of it."""

from __future__ import annotations

import textwrap

from tests.support.fakegpu import FakeGPU, MiB, build_shim

from .shimstep import CUDA_PY, driver_for

OOM = 2


def test_allocation_above_the_quota_is_out_of_memory(make_step) -> None:
    step = make_step(memory=8 * MiB)
    got = step.run("fill", str(1 * MiB))
    assert got == {"total": 8 * MiB}  # the device has 64 MiB; the step may use 8
    assert step.gpu.stats()["peak"] == 8 * MiB
    got = step.python(
        CUDA_PY
        + textwrap.dedent("""
    codes = [alloc(3 << 20)[0] for _ in range(3)]
    rc_big, _ = alloc(9 << 20)
    print(json.dumps({"codes": codes, "big": rc_big}))
    """)
    )
    assert got == {"codes": [0, 0, OOM], "big": OOM}
    counters = step.counters()
    assert counters["limits_ok"] and counters["memory_limit"] == 8 * MiB
    assert counters["refused"] >= 2 and counters["peak"] == 8 * MiB
    assert counters["devices"][0]["uuid"] == step.gpu.devices[0].uuid


def test_every_allocation_kind_is_charged(make_step) -> None:
    step = make_step(memory=1 * MiB)
    got = step.python(
        CUDA_PY
        + textwrap.dedent("""
    p = ctypes.c_uint64(); pitch = ctypes.c_size_t(); stream = ctypes.c_void_p(); pool = ctypes.c_void_p()
    handle = ctypes.c_uint64(); arr = ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(stream), 0) == 0
    assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), 0) == 0
    class Desc3(ctypes.Structure):
        _fields_ = [("w", ctypes.c_size_t), ("h", ctypes.c_size_t), ("d", ctypes.c_size_t),
                    ("fmt", ctypes.c_int), ("ch", ctypes.c_uint), ("flags", ctypes.c_uint)]
    class Prop(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("handles", ctypes.c_int), ("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int),
                    ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]
    big = 2 << 20
    codes = {
        "pitch": cu.cuMemAllocPitch_v2(ctypes.byref(p), ctypes.byref(pitch), ctypes.c_size_t(big), ctypes.c_size_t(1), 4),
        "managed": cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(big), 1),
        "async": cu.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(big), stream),
        "pool": cu.cuMemAllocFromPoolAsync(ctypes.byref(p), ctypes.c_size_t(big), pool, stream),
        "vmm": cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(big), ctypes.byref(Prop(1, 0, 1, 0)), ctypes.c_ulonglong(0)),
        "array3d": cu.cuArray3DCreate_v2(ctypes.byref(arr), ctypes.byref(Desc3(1024, 1024, 1, 0x20, 1, 0))),
        "mipmapped": cu.cuMipmappedArrayCreate(ctypes.byref(arr), ctypes.byref(Desc3(512, 512, 1, 0x20, 1, 0)), 3),
        "legacy": cu.cuMemAlloc(ctypes.byref(ctypes.c_uint()), 1024),
    }
    # Within the quota each kind succeeds, and its release gives the room back.
    ok = {}
    ok["async"] = cu.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(900 << 10), stream)
    ok["free_async"] = cu.cuMemFreeAsync(p, stream)
    ok["vmm"] = cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(900 << 10), ctypes.byref(Prop(1, 0, 1, 0)), ctypes.c_ulonglong(0))
    ok["release"] = cu.cuMemRelease(handle)
    ok["array3d"] = cu.cuArray3DCreate_v2(ctypes.byref(arr), ctypes.byref(Desc3(256, 256, 1, 0x20, 1, 0)))
    ok["destroy"] = cu.cuArrayDestroy(arr)
    ok["again"] = alloc(1 << 20)[0]
    print(json.dumps({"codes": codes, "ok": ok}))
    """)
    )
    assert got["codes"] == {k: OOM for k in got["codes"]} | {
        "legacy": 801
    }  # CUDA_ERROR_NOT_SUPPORTED
    assert set(got["ok"].values()) == {0}
    assert step.gpu.stats()["peak"] <= 1 * MiB


def test_memory_reports_show_the_limit_and_the_steps_own_use(make_step) -> None:
    step = make_step(memory=16 * MiB, device_memory=64 * MiB)
    holder = step.popen("hold", str(4 * MiB))  # another process of the same step
    try:
        assert holder.stdout.readline().startswith("ready")
        got = step.python(
            CUDA_PY
            + textwrap.dedent("""
        import pynvml
        rc, p = alloc(2 << 20)
        free, total, dev_total = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        assert cu.cuDeviceTotalMem_v2(ctypes.byref(dev_total), 0) == 0
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        print(json.dumps({"cuda": [free.value, total.value, dev_total.value],
                          "nvml": [m1.total, m1.used, m1.free], "nvml2": [m2.total, m2.used, m2.free]}))
        """)
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert got["cuda"] == [10 * MiB, 16 * MiB, 16 * MiB]
    assert got["nvml"] == [16 * MiB, 6 * MiB, 10 * MiB] and got["nvml2"] == got["nvml"]


def test_memory_reports_never_exceed_what_the_device_has(make_step) -> None:
    step = make_step(memory=1 << 40, device_memory=32 * MiB)
    got = step.python(
        CUDA_PY
        + textwrap.dedent("""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    print(json.dumps([free.value, total.value, alloc(33 << 20)[0]]))
    """)
    )
    assert got == [32 * MiB, 32 * MiB, OOM]  # the driver's own refusal


def test_freed_blocks_are_zeroed_before_release(make_step) -> None:
    code = CUDA_PY + textwrap.dedent("""
    rc, p = alloc(1 << 20)
    assert rc == 0
    secret = b"tenant-A-secret!" * 4096
    assert cu.cuMemcpyHtoD_v2(ctypes.c_uint64(p), secret, ctypes.c_size_t(len(secret))) == 0
    assert cu.cuMemFree_v2(ctypes.c_uint64(p)) == 0
    stream = ctypes.c_void_p(); q = ctypes.c_uint64()
    assert cu.cuStreamCreate(ctypes.byref(stream), 0) == 0
    assert cu.cuMemAllocAsync(ctypes.byref(q), ctypes.c_size_t(1 << 20), stream) == 0
    assert cu.cuMemcpyHtoD_v2(q, secret, ctypes.c_size_t(len(secret))) == 0
    assert cu.cuMemFreeAsync(q, stream) == 0
    # cuMemCreate: written through a mapping, released after the unmap (the shim maps it to zero it)
    import struct
    prop = struct.pack("iiiiP8x", 1, 0, 1, 0, 0)  # pinned, on device 0
    handle = ctypes.c_uint64(); va = ctypes.c_uint64()
    assert cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(1 << 21), prop, ctypes.c_ulonglong(0)) == 0
    assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(1 << 21), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_ulonglong(0)) == 0
    assert cu.cuMemMap(va, ctypes.c_size_t(1 << 21), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)) == 0
    assert cu.cuMemSetAccess(va, ctypes.c_size_t(1 << 21), struct.pack("iii", 1, 0, 3), ctypes.c_size_t(1)) == 0
    assert cu.cuMemcpyHtoD_v2(va, secret, ctypes.c_size_t(len(secret))) == 0
    assert cu.cuMemUnmap(va, ctypes.c_size_t(1 << 21)) == 0
    assert cu.cuMemAddressFree(va, ctypes.c_size_t(1 << 21)) == 0
    assert cu.cuMemRelease(handle) == 0
    print(json.dumps({"p": p, "q": q.value, "vmm": handle.value}))
    """)
    scrubbing = make_step(memory=8 * MiB, scrub=True)
    got = scrubbing.python(code)
    for pointer in (got["p"], got["q"], got["vmm"]):
        assert scrubbing.gpu.read_memory(offset=FakeGPU.offset_of(pointer), size=1 << 20) == bytes(
            1 << 20
        )
    assert scrubbing.counters()["scrub_failures"] == 0
    # Control: without scrub_on_free the next tenant finds the data in the same device memory.
    keeping = make_step(memory=8 * MiB, scrub=False)
    got = keeping.python(code)
    for pointer in (got["p"], got["vmm"]):
        assert (
            keeping.gpu.read_memory(offset=FakeGPU.offset_of(pointer), size=16)
            == b"tenant-A-secret!"
        )


def test_no_environment_variable_loosens_the_limits(make_step, tmp_path) -> None:
    step = make_step(memory=4 * MiB)
    loose = tmp_path / "loose-limits"
    loose.write_text("version=1\nmemory=1099511627776\n")
    switches = {
        "CUDA_DISABLE_CONTROL": "true",
        "CUDA_DEVICE_MEMORY_LIMIT": "60g",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "60g",
        "CUDA_DEVICE_SM_LIMIT": "100",
        "GPU_CORE_UTILIZATION_POLICY": "disable",
        "SECUREML_SHIM": "off",
        "SECUREML_SHIM_LOG_LEVEL": "debug",
    }
    assert step.run("fill", str(1 * MiB), **switches) == {"total": 4 * MiB}
    # A process that names another limits file still shares the step's region... only when it is
    # the same file: a different file is a different step, so the compiled-in path must be what a
    # cluster uses (next test). Here: the step's own processes cannot loosen the region's limits.
    assert step.run("fill", str(1 * MiB), SECUREML_SHIM_LIMITS_FILE=str(step.limits_file)) == {
        "total": 4 * MiB
    }


def test_the_compiled_in_limits_path_wins_over_the_environment(make_step, tmp_path) -> None:
    fixed = tmp_path / "podinfo" / "limits"
    fixed.parent.mkdir()
    fixed.write_text("version=1\nmemory=2097152\n")
    shim = build_shim(
        flags=(f'-DSHIM_DEFAULT_LIMITS="{fixed}"',), name="libsecureml_shim_fixedpath.so"
    )
    step = make_step(memory=64 * MiB)
    env_file = tmp_path / "mine"
    env_file.write_text("version=1\nmemory=68719476736\n")
    got = step.run(
        "fill", str(1 * MiB), LD_PRELOAD=str(shim), SECUREML_SHIM_LIMITS_FILE=str(env_file)
    )
    assert got == {"total": 2 * MiB}
    fixed.unlink()  # where the compiled-in file does not exist, the environment names the file
    got = step.run(
        "fill", str(1 * MiB), LD_PRELOAD=str(shim), SECUREML_SHIM_LIMITS_FILE=str(step.limits_file)
    )
    assert got == {"total": 64 * MiB}


def test_missing_or_malformed_limits_refuse_everything(make_step, tmp_path) -> None:
    step = make_step(memory=8 * MiB)
    bad = tmp_path / "bad-limits"
    bad.write_text("version=1\nmemory=8M\n")
    got = step.run("fill", str(1 * MiB), SECUREML_SHIM_LIMITS_FILE=str(bad))
    assert got == {"total": 0}
    counters = step.counters()
    assert counters["limits_ok"] is False and "not a decimal integer" in counters["error"]
    got = step.run("fill", str(1 * MiB), SECUREML_SHIM_LIMITS_FILE=str(tmp_path / "absent"))
    assert got == {"total": 0}
    assert "cannot open limits file" in step.counters()["error"]


def test_silent_by_default_and_logs_when_asked(make_step) -> None:
    import subprocess

    step = make_step(memory=1 * MiB)
    quiet = subprocess.run(
        [str(step.driver), "fill", str(MiB)], env=step.env(), capture_output=True, text=True
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = subprocess.run(
        [str(step.driver), "fill", str(MiB)],
        env=step.env(SECUREML_SHIM_LOG_LEVEL="info"),
        capture_output=True,
        text=True,
    )
    assert "secureml-shim[" in loud.stderr and "refused" in loud.stderr


def test_without_the_shim_the_driver_alone_allows_everything(make_step) -> None:
    """Control for the tests above: the same driver without the preload uses the whole device."""
    import json
    import subprocess

    step = make_step(memory=4 * MiB, device_memory=16 * MiB)
    driver = driver_for(step.gpu)
    result = subprocess.run(
        [str(driver), "fill", str(MiB)], env=step.gpu.env(), capture_output=True, text=True
    )
    assert json.loads(result.stdout) == {"total": 16 * MiB}


def test_driver_errors_pass_through_unchanged(make_step) -> None:
    step = make_step(memory=4 * MiB)
    got = step.python(
        textwrap.dedent("""
    import ctypes, json
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    p = ctypes.c_uint64()
    no_context = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1024))
    ctx = ctypes.c_void_p()
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0
    bad_free = cu.cuMemFree_v2(ctypes.c_uint64(12345))
    zero = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(0))
    full = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4 << 20))
    print(json.dumps([no_context, bad_free, zero, full]))
    """)
    )
    assert got == [
        201,
        1,
        1,
        0,
    ]  # INVALID_CONTEXT, INVALID_VALUE, INVALID_VALUE, and the full quota still there


def test_each_device_has_its_own_quota_whatever_the_visible_order(make_step) -> None:
    """Accounts are keyed by device UUID: a process that reorders CUDA_VISIBLE_DEVICES charges the
    same physical device as its siblings and gets no second quota."""
    step = make_step(memory=8 * MiB, devices=2)
    holder = step.popen("hold", str(3 * MiB), CUDA_VISIBLE_DEVICES="1,0")  # ordinal 0 = device 1
    try:
        assert holder.stdout.readline().startswith("ready")
        got = step.python(
            CUDA_PY.replace(
                "cuCtxCreate_v2(ctypes.byref(ctx), 0, 0)", "cuCtxCreate_v2(ctypes.byref(ctx), 0, 1)"
            )
            + "print(json.dumps(sum(1 for _ in iter(lambda: alloc(1 << 20)[0] == 0, False))))"
        )
        assert got == 5  # ordinal 1 = device 1 in the default order: 8 MiB minus the holder's 3
        assert step.run("fill", str(MiB)) == {"total": 8 * MiB}  # device 0 is untouched
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert step.gpu.stats(1)["peak"] <= 8 * MiB and step.gpu.stats(0)["peak"] == 8 * MiB
