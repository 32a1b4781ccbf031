"""Launcher stages 3 and 6: zero the device memory this step can reach, before and after it runs.

Through the CUDA driver API (ctypes on `libcuda.so.1`, no toolkit needed), for every device CUDA
shows this process: take all free memory in chunks (halving the chunk on out-of-memory down to
`MIN_CHUNK`), zero each chunk with `cuMemsetD32`, read back (`sample`: a few windows per chunk;
`full`: everything) with `cuMemcpyDtoH`, release. The record says how many bytes were zeroed, what
fraction of the device's memory that covers, and the bandwidth.

The scrub never runs under the quota shim's limits: they would hide most of the device. In a
cluster the shim is preloaded into every process, the launcher included; the launcher claims its
role first (`shim.claim_launcher`), after which the shim passes its calls through. If the shim
enforces in this process all the same (no claim, or a shim that cannot be asked), the scrub refuses.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from secureml.core.errors import SecuremlError

from . import driver
from . import shim_control as shim
from .config import ScrubVerify

CUDA_LIBRARY = "libcuda.so.1"
FIRST_CHUNK = 1 << 30
MIN_CHUNK = 2 << 20
READ_WINDOW = 1 << 20
# The scrub must take at least this share of the memory the driver reported free; less means
# something else holds (or fragments) the device and the scrub would silently do less than asked.
MIN_TAKEN_FRACTION = 0.9
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


class ScrubError(SecuremlError):
    """Device memory could not be zeroed, or the read-back found it not zero."""


@dataclass
class _Chunk:
    pointer: int
    size: int


class CudaDriver:
    """The few CUDA driver entry points the scrub needs, each checked for its result code."""

    def __init__(self) -> None:
        try:
            self._lib = ctypes.CDLL(driver.library(CUDA_LIBRARY))
        except OSError as err:
            raise ScrubError(
                f"cannot load the CUDA driver ({CUDA_LIBRARY}): {err}",
                why="the scrub zeroes device memory through the CUDA driver API",
                fix="check that the NVIDIA container runtime mounted the driver into the pod",
            ) from None
        u64, c_int, c_uint = ctypes.c_uint64, ctypes.c_int, ctypes.c_uint
        ptr = ctypes.c_void_p
        self._sig("cuInit", [c_uint])
        self._sig("cuDeviceGetCount", [ctypes.POINTER(c_int)])
        self._sig("cuDeviceGet", [ctypes.POINTER(c_int), c_int])
        self._sig("cuDeviceGetName", [ctypes.c_char_p, c_int, c_int])
        self._sig("cuDeviceTotalMem_v2", [ctypes.POINTER(ctypes.c_size_t), c_int])
        self._sig("cuCtxCreate_v2", [ctypes.POINTER(ptr), c_uint, c_int])
        self._sig("cuCtxDestroy_v2", [ptr])
        self._sig("cuCtxSynchronize", [])
        self._sig(
            "cuMemGetInfo_v2", [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        )
        self._sig("cuMemAlloc_v2", [ctypes.POINTER(u64), ctypes.c_size_t])
        self._sig("cuMemFree_v2", [u64])
        self._sig("cuMemsetD32_v2", [u64, c_uint, ctypes.c_size_t])
        self._sig("cuMemsetD8_v2", [u64, ctypes.c_ubyte, ctypes.c_size_t])
        self._sig("cuMemcpyDtoH_v2", [ptr, u64, ctypes.c_size_t])
        self._sig("cuGetErrorName", [c_int, ctypes.POINTER(ctypes.c_char_p)])

    def _sig(self, name: str, argtypes: list[Any]) -> None:
        try:
            fn = getattr(self._lib, name)
        except AttributeError:
            raise ScrubError(
                f"the CUDA driver has no entry point {name}",
                why="the scrub needs it to zero or read back device memory",
                fix="update the NVIDIA driver on the node",
            ) from None
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int

    def error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
            return text.value.decode()
        return f"CUDA error {code}"

    def call(self, name: str, *args: Any) -> int:
        """Call `name`; return its result code (the caller decides which codes are failures)."""
        return int(getattr(self._lib, name)(*args))

    def check(self, name: str, *args: Any) -> None:
        code = self.call(name, *args)
        if code != CUDA_SUCCESS:
            raise ScrubError(
                f"{name} failed: {self.error_name(code)}",
                why="device memory cannot be proven clean when the driver refuses an operation",
                fix="check the GPU's health (nvidia-smi, dmesg) and drain the node if it persists",
            )


@contextmanager
def _context(cuda: CudaDriver, ordinal: int) -> Iterator[None]:
    device = ctypes.c_int()
    cuda.check("cuDeviceGet", ctypes.byref(device), ordinal)
    context = ctypes.c_void_p()
    cuda.check("cuCtxCreate_v2", ctypes.byref(context), 0, device)
    try:
        yield
    finally:
        cuda.call("cuCtxDestroy_v2", context)


def _take_free_memory(cuda: CudaDriver) -> list[_Chunk]:
    """Allocate as much device memory as the driver will give, largest chunks first."""
    chunks: list[_Chunk] = []
    size = FIRST_CHUNK
    pointer = ctypes.c_uint64()
    while size >= MIN_CHUNK:
        code = cuda.call("cuMemAlloc_v2", ctypes.byref(pointer), size)
        if code == CUDA_SUCCESS:
            chunks.append(_Chunk(pointer.value, size))
        elif code == CUDA_ERROR_OUT_OF_MEMORY:
            size //= 2
        else:
            for chunk in chunks:
                cuda.call("cuMemFree_v2", chunk.pointer)
            cuda.check("cuMemAlloc_v2", ctypes.byref(pointer), size)  # raises with the error name
    return chunks


def _windows(chunk: _Chunk, verify: ScrubVerify) -> Iterator[tuple[int, int]]:
    """`(offset, length)` ranges of `chunk` to read back."""
    if verify == "full":
        for offset in range(0, chunk.size, READ_WINDOW):
            yield offset, min(READ_WINDOW, chunk.size - offset)
        return
    if verify == "sample":
        window = min(READ_WINDOW, chunk.size)
        last = chunk.size - window
        for offset in sorted({0, (last // 2) & ~3, last}):
            yield offset, window


def _verify(cuda: CudaDriver, chunks: list[_Chunk], verify: ScrubVerify, ordinal: int) -> int:
    """Read the chosen windows back; raise `ScrubError` at the first non-zero byte. Bytes read."""
    buffer = ctypes.create_string_buffer(READ_WINDOW)
    zeros = bytes(READ_WINDOW)
    checked = 0
    for chunk in chunks:
        for offset, length in _windows(chunk, verify):
            cuda.check("cuMemcpyDtoH_v2", buffer, chunk.pointer + offset, length)
            if buffer.raw[:length] != zeros[:length]:
                raise ScrubError(
                    f"device {ordinal}: memory at offset {offset} of a {chunk.size}-byte chunk "
                    "is not zero after the scrub",
                    why="the memset did not take effect: the next tenant could read this data",
                    fix="drain the node and reset the GPU; report the driver version",
                )
            checked += length
    return checked


def scrub_device(cuda: CudaDriver, ordinal: int, verify: ScrubVerify) -> dict[str, Any]:
    """Zero (and verify) the free memory of CUDA device `ordinal`; its audit record."""
    name = ctypes.create_string_buffer(256)
    cuda.check("cuDeviceGetName", name, len(name), ordinal)
    total = ctypes.c_size_t()
    cuda.check("cuDeviceTotalMem_v2", ctypes.byref(total), ordinal)
    with _context(cuda, ordinal):
        free_before, total_now = ctypes.c_size_t(), ctypes.c_size_t()
        cuda.check("cuMemGetInfo_v2", ctypes.byref(free_before), ctypes.byref(total_now))
        started = time.perf_counter()
        chunks = _take_free_memory(cuda)
        try:
            for chunk in chunks:
                cuda.check("cuMemsetD32_v2", chunk.pointer, 0, chunk.size // 4)
            cuda.check("cuCtxSynchronize")
            zero_s = time.perf_counter() - started
            checked = _verify(cuda, chunks, verify, ordinal)
        finally:
            for chunk in chunks:
                cuda.call("cuMemFree_v2", chunk.pointer)
    zeroed = sum(chunk.size for chunk in chunks)
    if zeroed < MIN_TAKEN_FRACTION * free_before.value:
        raise ScrubError(
            f"device {ordinal}: could take only {zeroed} of the {free_before.value} bytes "
            "the driver reported free",
            why="memory the scrub cannot allocate cannot be zeroed: residue may remain there",
            fix="check for other processes on the GPU (nvidia-smi) and retry; drain the node if it persists",
        )
    return {
        "device": ordinal,
        "name": name.value.decode(errors="replace"),
        "total_bytes": total.value,
        "free_bytes": free_before.value,
        "zeroed_bytes": zeroed,
        "coverage": round(zeroed / total.value, 4) if total.value else 0.0,
        "chunks": len(chunks),
        "verify": verify,
        "verified_bytes": checked,
        "zero_seconds": round(zero_s, 6),
        "gb_per_s": round(zeroed / zero_s / 1e9, 3) if zero_s > 0 else None,
    }


def scrub_devices(verify: ScrubVerify) -> dict[str, Any]:
    """Scrub every CUDA device visible to this process; the stage's audit record."""
    if shim.enforcing_here():
        raise ScrubError(
            "the quota shim enforces its limits in the launcher process",
            why="under the shim the scrub would see only the step's quota, not the device's memory",
            fix="the launcher claims its role in the shim before any GPU call (stage shim-claim); "
            "check that the preloaded shim is the build shipped with this secureml release",
        )
    cuda = CudaDriver()
    cuda.check("cuInit", 0)
    count = ctypes.c_int()
    cuda.check("cuDeviceGetCount", ctypes.byref(count))
    if count.value == 0:
        raise ScrubError(
            "CUDA shows no device to scrub",
            why="the step was given a GPU, but its memory cannot be reached",
            fix="check CUDA_VISIBLE_DEVICES and the pod's GPU resource",
        )
    started = time.perf_counter()
    devices = [scrub_device(cuda, ordinal, verify) for ordinal in range(count.value)]
    elapsed = time.perf_counter() - started
    zeroed = sum(d["zeroed_bytes"] for d in devices)
    total = sum(d["total_bytes"] for d in devices)
    return {
        "devices": devices,
        "zeroed_bytes": zeroed,
        "coverage": round(zeroed / total, 4) if total else 0.0,
        "verify": verify,
        "gb_per_s": round(zeroed / elapsed / 1e9, 3) if elapsed > 0 else None,
    }
