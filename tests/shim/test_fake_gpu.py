"""The fake CUDA driver and fake NVML behave like the real ones where the suite relies on them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support.fakegpu import FakeDevice, FakeGPU, FakeMig, FakeProcess, MiB, run_python

CUDA_PRELUDE = textwrap.dedent(
    """
    import ctypes, json, sys
    cu = ctypes.CDLL("libcuda.so.1")
    def ok(rc, what):
        if rc != 0:
            print(json.dumps({"error": what, "rc": rc})); sys.exit(3)
    ok(cu.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0), "cuCtxCreate")
    def alloc(n):
        p = ctypes.c_uint64()
        rc = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
        return rc, p.value
    """
)


def _run(gpu: FakeGPU, body: str, **env_extra: str) -> dict:
    env = gpu.env()
    env.update(env_extra)
    result = run_python(CUDA_PRELUDE + textwrap.dedent(body), env)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_nvml_reports_the_configured_machine(make_fake_gpu) -> None:
    gpu = make_fake_gpu(
        devices=[
            FakeDevice(
                name="NVIDIA H100 80GB HBM3",
                memory=128 * MiB,
                retired_pages_pending=True,
                xids=[79, 48],
                remapped_rows_pending=True,
                retired_pages_dbe=2,
            ),
            FakeDevice(
                mig_mode=True,
                migs=[FakeMig("1g.10gb", 32 * MiB, gi=7), FakeMig("3g.40gb", 64 * MiB, gi=2)],
            ),
        ],
        processes=[FakeProcess(pid=4242, used=3 * MiB)],
        driver_version="560.35.03",
        cuda_version=12060,
    )
    code = """
    import json, pynvml
    pynvml.nvmlInit()
    h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    mem = pynvml.nvmlDeviceGetMemoryInfo(h0)
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(h0, version=pynvml.nvmlMemory_v2)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h0, pynvml.nvmlEventTypeXidCriticalError, es)
    xids = [pynvml.nvmlEventSetWait(es, 0).eventData for _ in range(2)]
    try:
        pynvml.nvmlEventSetWait(es, 0); more = True
    except pynvml.NVMLError_Timeout:
        more = False
    migs = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h1, i) for i in range(2)]
    print(json.dumps({
        "count": pynvml.nvmlDeviceGetCount(),
        "name": pynvml.nvmlDeviceGetName(h0), "uuid": pynvml.nvmlDeviceGetUUID(h0),
        "mem": [mem.total, mem.used, mem.free], "mem2": [mem2.total, mem2.used],
        "procs": [[p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h0)],
        "pending": pynvml.nvmlDeviceGetRetiredPagesPendingStatus(h0),
        "dbe": len(pynvml.nvmlDeviceGetRetiredPages(h0, 1)),
        "remapped": list(pynvml.nvmlDeviceGetRemappedRows(h0)),
        "xids": xids, "more_xids": more,
        "driver": pynvml.nvmlSystemGetDriverVersion(), "cuda": pynvml.nvmlSystemGetCudaDriverVersion(),
        "mig_mode": pynvml.nvmlDeviceGetMigMode(h1), "mig_mode0": pynvml.nvmlDeviceGetMigMode(h0),
        "mig_names": [pynvml.nvmlDeviceGetName(m) for m in migs],
        "mig_uuids": [pynvml.nvmlDeviceGetUUID(m) for m in migs],
        "gi": [pynvml.nvmlDeviceGetGpuInstanceId(m) for m in migs],
        "is_mig": [pynvml.nvmlDeviceIsMigDeviceHandle(m).value for m in migs] + [pynvml.nvmlDeviceIsMigDeviceHandle(h0).value],
        "mig_mem": [pynvml.nvmlDeviceGetMemoryInfo(m).total for m in migs],
        "parent": pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migs[0])),
    }))
    """
    result = run_python(textwrap.dedent(code), gpu.env())
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["count"] == 2
    assert got["name"] == "NVIDIA H100 80GB HBM3" and got["uuid"] == gpu.devices[0].uuid
    assert got["mem"] == [128 * MiB, 3 * MiB, 125 * MiB] and got["mem2"] == [128 * MiB, 3 * MiB]
    assert got["procs"] == [[4242, 3 * MiB]]
    assert got["pending"] == 1 and got["dbe"] == 2 and got["remapped"] == [0, 0, 1, 0]
    assert got["xids"] == [79, 48] and got["more_xids"] is False
    assert got["driver"] == "560.35.03" and got["cuda"] == 12060
    assert got["mig_mode"] == [1, 1] and got["mig_mode0"] == [0, 0]
    assert got["mig_names"] == [
        "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    ]
    assert got["mig_uuids"] == [m.uuid for m in gpu.devices[1].migs]
    assert got["gi"] == [7, 2] and got["is_mig"] == [1, 1, 0]
    assert got["mig_mem"] == [32 * MiB, 64 * MiB] and got["parent"] == gpu.devices[1].uuid


def test_device_memory_and_accounting_are_shared_by_processes(make_fake_gpu) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=64 * MiB, residue=0xA5)])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CUDA_PRELUDE
            + textwrap.dedent("""
        rc, p = alloc(8 << 20)
        ok(rc, "alloc")
        print(p, flush=True)
        sys.stdin.read()
        """),
        ],
        env=gpu.env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pointer = int(holder.stdout.readline())
        # Another process sees the holder's use through NVML and the driver's memory info.
        seen = _run(
            gpu,
            """
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "info")
        procs = [[p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        print(json.dumps({"free": free.value, "procs": procs}))
        """,
        )
        assert seen == {"free": 56 * MiB, "procs": [[holder.pid, 8 * MiB]]}
        assert gpu.stats()["used"] == 8 * MiB
        # The residue planted at creation is what a fresh allocation reads.
        assert gpu.read_memory(offset=FakeGPU.offset_of(pointer), size=4) == b"\xa5" * 4
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        stats = gpu.stats()  # the dead process's allocation is released, as the driver would
        assert stats["used"] == 0 and stats["peak"] == 8 * MiB and stats["live_blocks"] == 0
    finally:
        holder.kill()
        holder.wait()


def test_memset_and_copies_reach_device_memory(make_fake_gpu) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=16 * MiB, residue=0x5C)])
    got = _run(
        gpu,
        """
    rc, p = alloc(4096)
    ok(rc, "alloc")
    ok(cu.cuMemsetD8_v2(ctypes.c_uint64(p), 0, ctypes.c_size_t(4096)), "memset")
    ok(cu.cuMemcpyHtoD_v2(ctypes.c_uint64(p + 100), b"secret", ctypes.c_size_t(6)), "htod")
    back = ctypes.create_string_buffer(8)
    ok(cu.cuMemcpyDtoH_v2(back, ctypes.c_uint64(p + 98), ctypes.c_size_t(8)), "dtoh")
    outside = cu.cuMemsetD8_v2(ctypes.c_uint64(p + 4096), 0, ctypes.c_size_t(1))
    ok(cu.cuMemFree_v2(ctypes.c_uint64(p)), "free")
    print(json.dumps({"p": p, "back": back.raw.hex(), "outside": outside,
                      "double_free": cu.cuMemFree_v2(ctypes.c_uint64(p))}))
    """,
    )
    assert bytes.fromhex(got["back"]) == b"\0\0secret"
    assert got["outside"] == 1 and got["double_free"] == 1  # CUDA_ERROR_INVALID_VALUE
    memory = gpu.read_memory(offset=FakeGPU.offset_of(got["p"]), size=4096 + 512)
    assert memory[:100] == bytes(100) and memory[100:106] == b"secret"
    assert memory[4096:] == b"\x5c" * 512  # beyond the block: untouched residue


def test_zero_fills_punch_holes_and_allocations_touch_nothing(make_fake_gpu) -> None:
    # device 0: a previous tenant's residue in every byte; device 1: 8 GiB that nobody planted
    gpu = make_fake_gpu(
        devices=[FakeDevice(memory=64 * MiB, residue=0x5C), FakeDevice(memory=8 << 30)]
    )
    got = _run(
        gpu,
        f"""
    import os, time
    rc, p = alloc({16 * MiB})
    ok(rc, "alloc")
    ok(cu.cuMemsetD32_v2(ctypes.c_uint64(p + 100), 0, ctypes.c_size_t({8 * MiB // 4})), "memset d32")
    ctx1 = ctypes.c_void_p()
    ok(cu.cuCtxCreate_v2(ctypes.byref(ctx1), 0, 1), "cuCtxCreate device 1")
    chunks = [alloc(1 << 30) for _ in range(8)]
    assert all(rc == 0 for rc, _ in chunks), chunks
    allocated = os.stat(sys.argv[1]).st_blocks * 512
    started = time.perf_counter()
    for _, q in chunks:
        ok(cu.cuMemsetD8_v2(ctypes.c_uint64(q), 0, ctypes.c_size_t(1 << 30)), "memset d8")
    seconds = time.perf_counter() - started
    back = ctypes.create_string_buffer(1 << 20)
    ok(cu.cuMemcpyDtoH_v2(back, ctypes.c_uint64(chunks[3][1] + (1 << 29)), ctypes.c_size_t(1 << 20)), "dtoh")
    print(json.dumps({{"p": p, "allocated": allocated, "seconds": seconds, "zeros": back.raw.count(0),
                      "disk": os.stat(sys.argv[1]).st_blocks * 512}}))
    """.replace("sys.argv[1]", repr(str(gpu.memory_path(1)))),
    )
    assert got["allocated"] == 0  # taking all 8 GiB wrote nothing
    assert got["disk"] < 4 * MiB and got["seconds"] < 5  # zeroing them neither
    assert got["zeros"] == MiB  # and they read back as zeros
    start = FakeGPU.offset_of(got["p"])
    memory = gpu.read_memory(offset=start, size=16 * MiB)
    assert memory[:100] == b"\x5c" * 100  # before the span: the residue
    assert memory[100 : 100 + 8 * MiB] == bytes(
        8 * MiB
    )  # the span: zero, also in its partial pages
    assert memory[100 + 8 * MiB :] == b"\x5c" * (8 * MiB - 100)  # after it: the residue
    assert (
        gpu.memory_path(0).stat().st_blocks * 512 <= 64 * MiB - 8 * MiB + 8192
    )  # holes where zeroed


def test_out_of_memory_and_injected_failures(make_fake_gpu) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(memory=4 * MiB)], fail_alloc_after=3)
    got = _run(
        gpu,
        """
    codes = [alloc(1 << 20)[0] for _ in range(4)]
    print(json.dumps({"codes": codes, "huge": alloc(1 << 45)[0]}))
    """,
    )
    assert got == {"codes": [0, 0, 0, 2], "huge": 2}
    assert gpu.stats()["failed"] == 2

    small = make_fake_gpu(devices=[FakeDevice(memory=4 * MiB)])
    got = _run(
        small,
        """print(json.dumps({"codes": [alloc(3 << 20)[0], alloc(2 << 20)[0], alloc(1 << 20)[0]]}))""",
    )
    assert got == {"codes": [0, 2, 0]}

    broken = make_fake_gpu(fail_cuinit=999, fail_nvmlinit=9)
    result = run_python(CUDA_PRELUDE, broken.env())
    assert json.loads(result.stdout) == {"error": "cuInit", "rc": 999}
    result = run_python("import pynvml; pynvml.nvmlInit()", broken.env())
    assert result.returncode != 0 and "Driver Not Loaded" in result.stderr


def test_visible_devices_select_mig_instances(make_fake_gpu) -> None:
    mig = FakeMig("2g.20gb", 48 * MiB)
    gpu = make_fake_gpu(devices=[FakeDevice(), FakeDevice(mig_mode=True, migs=[FakeMig(), mig])])
    body = """
    n = ctypes.c_int(); ok(cu.cuDeviceGetCount(ctypes.byref(n)), "count")
    name = ctypes.create_string_buffer(128); ok(cu.cuDeviceGetName(name, 128, 0), "name")
    total = ctypes.c_size_t(); ok(cu.cuDeviceTotalMem_v2(ctypes.byref(total), 0), "total")
    rc, p = alloc(1 << 20)
    print(json.dumps({"n": n.value, "name": name.value.decode(), "total": total.value, "rc": rc}))
    """
    assert _run(gpu, body) == {"n": 1, "name": "NVIDIA A100-SXM4-80GB", "total": 256 * MiB, "rc": 0}
    on_mig = _run(gpu, body, CUDA_VISIBLE_DEVICES=mig.uuid)
    assert on_mig == {
        "n": 1,
        "name": "NVIDIA A100-SXM4-80GB MIG 2g.20gb",
        "total": 48 * MiB,
        "rc": 0,
    }
    assert gpu.stats(1, mig=1)["peak"] == 1 * MiB and gpu.stats(1, mig=0)["peak"] == 0


@pytest.mark.timing
def test_launches_occupy_the_device_and_drive_utilisation(make_fake_gpu) -> None:
    gpu = make_fake_gpu(kernel_us=2000, util_window_ms=50)
    got = _run(
        gpu,
        """
    import time, pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    t0 = time.monotonic()
    for _ in range(40):
        ok(cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None), "launch")
    queued = time.monotonic() - t0
    time.sleep(max(0.0, 0.065 - (time.monotonic() - t0)))  # inside the 80 ms of queued work
    busy = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
    ok(cu.cuCtxSynchronize(), "sync")
    waited = time.monotonic() - t0
    time.sleep(0.08)
    idle = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
    print(json.dumps({"queued": queued, "waited": waited, "busy": busy, "idle": idle}))
    """,
    )
    assert got["queued"] < 0.05  # launches are asynchronous
    assert got["waited"] >= 0.079  # 40 x 2 ms of simulated work
    assert got["busy"] >= 95 and got["idle"] == 0
    stats = gpu.stats()
    assert stats["launches"] == 40 and stats["busy_ns"] == 40 * 2_000_000


def test_get_proc_address_resolves_versions_and_stream_flavours(make_fake_gpu) -> None:
    gpu = make_fake_gpu()
    got = _run(
        gpu,
        """
    def proc(name, version, flags):
        fn = ctypes.c_void_p(); status = ctypes.c_int(-1)
        rc = cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, ctypes.c_uint64(flags), ctypes.byref(status))
        return rc, fn.value, status.value
    def addr(name):
        return ctypes.cast(getattr(cu, name), ctypes.c_void_p).value
    print(json.dumps({
        "alloc": proc("cuMemAlloc", 12040, 0)[1] == addr("cuMemAlloc_v2"),
        "launch": proc("cuLaunchKernel", 12040, 0)[1] == addr("cuLaunchKernel"),
        "launch_ptsz": proc("cuLaunchKernel", 12040, 2)[1] == addr("cuLaunchKernel_ptsz"),
        "ctx_old": proc("cuCtxCreate", 12000, 0)[1] == addr("cuCtxCreate_v2"),
        "ctx_new": proc("cuCtxCreate", 12080, 0)[1] == addr("cuCtxCreate_v4"),
        "too_old": proc("cuMemAllocAsync", 11000, 0),
        "missing": proc("cuNoSuchThing", 12040, 0),
        "self": proc("cuGetProcAddress", 12040, 0)[1] == addr("cuGetProcAddress_v2"),
    }))
    """,
    )
    assert (
        got["alloc"]
        and got["launch"]
        and got["launch_ptsz"]
        and got["ctx_old"]
        and got["ctx_new"]
        and got["self"]
    )
    assert got["too_old"] == [500, None, 2] and got["missing"] == [500, None, 1]


def test_a_broken_configuration_is_reported(make_fake_gpu) -> None:
    gpu = make_fake_gpu()
    gpu.config_path.write_text("device memory=lots\n")
    result = run_python(CUDA_PRELUDE, gpu.env())
    assert json.loads(result.stdout) == {"error": "cuInit", "rc": 3}
    assert "bad value for: memory" in result.stderr


def test_fixture_environment_reaches_a_driver(fake_gpu) -> None:
    """Runs against the fake, or unchanged against a real GPU with SECUREML_TEST_REAL_GPU=1."""
    result = run_python(
        "import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0);"
        "print(pynvml.nvmlDeviceGetMemoryInfo(h).total > 0, pynvml.nvmlDeviceGetUUID(h)[:4])",
        fake_gpu.env(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() in (["True", "GPU-"], ["True", "MIG-"])
