"""CUDA arrays and graph memory nodes under the quota (issue 13 item 3): arrays are charged, refused
over the quota, released on destroy and zeroed then when scrub_on_free is set; a graph memory
allocation node (added, or made by a stream capture) is charged when it is added, refused over the
quota, and released only once the graph and its executable graph are gone and the device is
trimmed. The fake driver's own count of
the memory it gave out is the ground truth that never passes the limit."""

from __future__ import annotations

import textwrap

from tests.support.fakegpu import FakeGPU, MiB, run_python

from .shimstep import CUDA_PY

OOM = 2

ARRAYS = """
class Desc3(ctypes.Structure):
    _fields_ = [("w", ctypes.c_size_t), ("h", ctypes.c_size_t), ("d", ctypes.c_size_t),
                ("fmt", ctypes.c_int), ("ch", ctypes.c_uint), ("flags", ctypes.c_uint)]
class Copy3D(ctypes.Structure):
    _fields_ = [("srcX", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcZ", ctypes.c_size_t), ("srcLOD", ctypes.c_size_t),
                ("srcType", ctypes.c_int), ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("reserved0", ctypes.c_void_p), ("srcPitch", ctypes.c_size_t), ("srcHeight", ctypes.c_size_t),
                ("dstX", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstZ", ctypes.c_size_t), ("dstLOD", ctypes.c_size_t),
                ("dstType", ctypes.c_int), ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                ("reserved1", ctypes.c_void_p), ("dstPitch", ctypes.c_size_t), ("dstHeight", ctypes.c_size_t),
                ("width", ctypes.c_size_t), ("height", ctypes.c_size_t), ("depth", ctypes.c_size_t)]
def fill(array, row, rows, depth, byte):
    data = ctypes.create_string_buffer(bytes([byte]) * (row * rows * depth))
    c = Copy3D(srcType=1, srcHost=ctypes.cast(data, ctypes.c_void_p), srcPitch=row, srcHeight=rows,
               dstType=3, dstArray=array, width=row, height=rows, depth=depth)
    rc = cu.cuMemcpy3D_v2(ctypes.byref(c)); assert rc == 0, rc
"""

GRAPHS = """
class Props(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("locType", ctypes.c_int), ("locId", ctypes.c_int),
                ("win32", ctypes.c_void_p), ("maxSize", ctypes.c_size_t), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]
class AllocParams(ctypes.Structure):
    _fields_ = [("poolProps", Props), ("accessDescs", ctypes.c_void_p), ("accessDescCount", ctypes.c_size_t),
                ("bytesize", ctypes.c_size_t), ("dptr", ctypes.c_uint64)]
class NodeParams(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("alloc", AllocParams),
                ("pad", ctypes.c_byte * (29 * 8 - ctypes.sizeof(AllocParams))), ("reserved2", ctypes.c_longlong)]
def graph():
    g = ctypes.c_void_p()
    assert cu.cuGraphCreate(ctypes.byref(g), 0) == 0
    return g
def node(g, n, generic=False):
    out = ctypes.c_void_p()
    params = AllocParams(poolProps=Props(allocType=1, locType=1, locId=0), bytesize=n)
    if generic:
        return cu.cuGraphAddNode(ctypes.byref(out), g, None, ctypes.c_size_t(0), ctypes.byref(NodeParams(type=10, alloc=params)))
    return cu.cuGraphAddMemAllocNode(ctypes.byref(out), g, None, ctypes.c_size_t(0), ctypes.byref(params))
def instantiate(g):
    e = ctypes.c_void_p()
    assert cu.cuGraphInstantiateWithFlags(ctypes.byref(e), g, ctypes.c_ulonglong(0)) == 0
    return e
"""


def test_arrays_are_charged_and_their_release_gives_the_room_back(make_step) -> None:
    step = make_step(memory=2 * MiB)
    got = step.python(
        CUDA_PY
        + ARRAYS
        + textwrap.dedent("""
    a = ctypes.c_void_p(); b = ctypes.c_void_p(); m = ctypes.c_void_p()
    out = {}
    # 512 x 512 floats: 1 MiB each; a third does not fit in 2 MiB
    out["first"] = cu.cuArray3DCreate_v2(ctypes.byref(a), ctypes.byref(Desc3(512, 512, 0, 0x20, 1, 0)))
    out["second"] = cu.cuArray3DCreate_v2(ctypes.byref(b), ctypes.byref(Desc3(512, 512, 0, 0x20, 1, 0)))
    out["over"] = cu.cuArray3DCreate_v2(ctypes.byref(m), ctypes.byref(Desc3(512, 512, 0, 0x20, 1, 0)))
    # a mipmapped array is charged for every level: 1 MiB + 256 KiB + 64 KiB does not fit in 1 MiB
    out["destroy"] = cu.cuArrayDestroy(b)
    out["mip_over"] = cu.cuMipmappedArrayCreate(ctypes.byref(m), ctypes.byref(Desc3(512, 512, 0, 0x20, 1, 0)), 3)
    out["mip_fits"] = cu.cuMipmappedArrayCreate(ctypes.byref(m), ctypes.byref(Desc3(256, 256, 0, 0x20, 1, 0)), 3)
    out["mip_destroy"] = cu.cuMipmappedArrayDestroy(m)
    out["again"] = cu.cuArray3DCreate_v2(ctypes.byref(b), ctypes.byref(Desc3(512, 512, 0, 0x20, 1, 0)))
    out["linear_over"] = alloc(1 << 20)[0]
    print(json.dumps(out))
    """)
    )
    assert got == {
        "first": 0,
        "second": 0,
        "over": OOM,
        "destroy": 0,
        "mip_over": OOM,
        "mip_fits": 0,
        "mip_destroy": 0,
        "again": 0,
        "linear_over": OOM,
    }
    assert step.gpu.stats()["peak"] <= 2 * MiB


def test_arrays_are_zeroed_on_destroy_with_scrub_on(make_step) -> None:
    code = (
        CUDA_PY
        + ARRAYS
        + textwrap.dedent("""
    a = ctypes.c_void_p(); m = ctypes.c_void_p()
    # a layered 2D array: 256 floats a row, 64 rows, 2 layers (128 KiB)
    assert cu.cuArray3DCreate_v2(ctypes.byref(a), ctypes.byref(Desc3(256, 64, 2, 0x20, 1, 1))) == 0
    fill(a, 1024, 64, 2, 0xA5)
    assert cu.cuMipmappedArrayCreate(ctypes.byref(m), ctypes.byref(Desc3(128, 128, 0, 0x08, 4, 0)), 3) == 0
    for level, (w, h) in enumerate([(128, 128), (64, 64), (32, 32)]):
        lv = ctypes.c_void_p()
        assert cu.cuMipmappedArrayGetLevel(ctypes.byref(lv), m, level) == 0
        fill(lv, w * 4, h, 1, 0x5A)
    assert cu.cuArrayDestroy(a) == 0
    assert cu.cuMipmappedArrayDestroy(m) == 0
    print(json.dumps({"array": a.value, "mip": m.value}))
    """)
    )
    array_bytes, mip_bytes = 256 * 4 * 64 * 2, (128 * 128 + 64 * 64 + 32 * 32) * 4
    scrubbing = make_step(memory=8 * MiB, scrub=True)
    got = scrubbing.python(code)
    memory = scrubbing.gpu.read_memory
    assert memory(offset=FakeGPU.offset_of(got["array"]), size=array_bytes) == bytes(array_bytes)
    assert memory(offset=FakeGPU.offset_of(got["mip"]), size=mip_bytes) == bytes(mip_bytes)
    assert scrubbing.counters()["scrub_failures"] == 0
    # Control: without scrub_on_free the data stays in the device memory the next tenant gets.
    keeping = make_step(memory=8 * MiB, scrub=False)
    got = keeping.python(code)
    memory = keeping.gpu.read_memory
    assert memory(offset=FakeGPU.offset_of(got["array"]), size=array_bytes) == b"\xa5" * array_bytes
    assert memory(offset=FakeGPU.offset_of(got["mip"]), size=mip_bytes) == b"\x5a" * mip_bytes


def test_graph_memory_nodes_are_charged_until_the_graph_is_gone_and_trimmed(make_step) -> None:
    step = make_step(memory=4 * MiB)
    got = step.python(
        CUDA_PY
        + GRAPHS
        + textwrap.dedent("""
    out = {}
    g = graph()
    out["node"] = node(g, 2 << 20)
    out["generic_over"] = node(g, 3 << 20, generic=True)
    out["generic"] = node(g, 1 << 20, generic=True)
    out["linear_over"] = alloc(2 << 20)[0]
    e = instantiate(g)
    out["destroy_graph"] = cu.cuGraphDestroy(g)
    out["after_graph_destroy"] = alloc(2 << 20)[0]   # the executable graph still holds the memory
    out["destroy_exec"] = cu.cuGraphExecDestroy(e)
    out["before_trim"] = alloc(2 << 20)[0]           # the driver's pool still holds it until a trim
    out["trim"] = cu.cuDeviceGraphMemTrim(0)
    rc, p = alloc(3 << 20)
    out["after_trim"] = rc
    assert cu.cuMemFree_v2(ctypes.c_uint64(p)) == 0
    # A graph never instantiated: destroy and trim give the room back too.
    g = graph()
    out["node_again"] = node(g, 4 << 20)
    out["destroy_again"] = cu.cuGraphDestroy(g)
    out["trim_again"] = cu.cuDeviceGraphMemTrim(0)
    out["whole_quota"] = alloc(4 << 20)[0]
    print(json.dumps(out))
    """)
    )
    assert got == {
        "node": 0,
        "generic_over": OOM,
        "generic": 0,
        "linear_over": OOM,
        "destroy_graph": 0,
        "after_graph_destroy": OOM,
        "destroy_exec": 0,
        "before_trim": OOM,
        "trim": 0,
        "after_trim": 0,
        "node_again": 0,
        "destroy_again": 0,
        "trim_again": 0,
        "whole_quota": 0,
    }
    stats = step.gpu.stats()
    assert stats["peak"] <= 4 * MiB
    assert stats["used"] == 0  # everything given back: nothing lost in the pool


def test_memory_a_stream_capture_allocates_or_frees_is_charged_to_the_graph(make_step) -> None:
    """cuMemAllocAsync and cuMemFreeAsync on a stream being captured become the graph's allocation
    and free nodes: the memory is the graph's from then on, so the captured free releases nothing and
    the charge follows the graph to its destruction and a trim."""
    step = make_step(memory=4 * MiB)
    got = step.python(
        CUDA_PY
        + textwrap.dedent("""
    out = {}
    s = ctypes.c_void_p(); p = ctypes.c_uint64(); q = ctypes.c_uint64(); g = ctypes.c_void_p()
    assert cu.cuStreamCreate(ctypes.byref(s), 0) == 0
    assert cu.cuMemAllocAsync(ctypes.byref(q), ctypes.c_size_t(1 << 20), s) == 0  # before the capture
    assert cu.cuStreamBeginCapture_v2(s, 0) == 0
    out["captured_alloc"] = cu.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(2 << 20), s)
    out["captured_free"] = cu.cuMemFreeAsync(p, s)
    out["captured_free_of_earlier"] = cu.cuMemFreeAsync(q, s)
    out["during_capture"] = alloc(2 << 20)[0]
    out["end"] = cu.cuStreamEndCapture(s, ctypes.byref(g))
    out["with_the_graph"] = alloc(2 << 20)[0]
    out["destroy"] = cu.cuGraphDestroy(g)
    out["before_trim"] = alloc(2 << 20)[0]
    out["trim"] = cu.cuDeviceGraphMemTrim(0)
    out["whole_quota"] = alloc(4 << 20)[0]
    print(json.dumps(out))
    """)
    )
    assert got == {
        "captured_alloc": 0,
        "captured_free": 0,
        "captured_free_of_earlier": 0,
        "during_capture": OOM,
        "end": 0,
        "with_the_graph": OOM,
        "destroy": 0,
        "before_trim": OOM,
        "trim": 0,
        "whole_quota": 0,
    }
    assert step.gpu.stats()["peak"] <= 4 * MiB


def test_without_the_shim_the_fake_driver_gives_graph_and_array_memory_past_the_quota(
    make_step,
) -> None:
    """Control: the refusals above are the shim's; the fake driver alone allocates them."""
    step = make_step(memory=1 * MiB)
    code = (
        CUDA_PY
        + ARRAYS
        + GRAPHS
        + textwrap.dedent("""
    a = ctypes.c_void_p()
    g = graph()
    print(json.dumps([cu.cuArray3DCreate_v2(ctypes.byref(a), ctypes.byref(Desc3(512, 1024, 0, 0x20, 1, 0))), node(g, 2 << 20)]))
    """)
    )
    result = run_python(code, step.gpu.env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[0, 0]"
