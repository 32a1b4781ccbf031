"""A GPU step for the launcher tests: uses device memory through the CUDA driver API (ctypes).

    python cuda_step.py --alloc BYTES [--report-nonzero] [--fill BYTE] [--free] [--hold SECONDS]
                        [--ignore-term] [--ready FILE]

Allocates BYTES on device 0; with --report-nonzero prints how many of them were not zero when it
got them (what a new tenant finds); fills them with BYTE (a tenant's data), optionally frees them,
writes FILE when the memory is in use, then holds it for SECONDS. Runs unchanged on the fake driver and on
a real one.
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import sys
import time
from pathlib import Path


def check(code: int, what: str) -> None:
    if code != 0:
        sys.exit(f"{what} failed with CUDA error {code}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alloc", type=int, required=True)
    parser.add_argument("--fill", type=lambda text: int(text, 0), default=None)
    parser.add_argument("--report-nonzero", action="store_true")
    parser.add_argument("--free", action="store_true")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--ready", type=Path)
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    check(cuda.cuInit(0), "cuInit")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    pointer = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), args.alloc), "cuMemAlloc")
    if args.report_nonzero:
        found = ctypes.create_string_buffer(args.alloc)
        check(cuda.cuMemcpyDtoH_v2(found, pointer.value, args.alloc), "cuMemcpyDtoH")
        print(args.alloc - found.raw.count(0), flush=True)
    if args.fill is not None:
        check(cuda.cuMemsetD8_v2(pointer.value, args.fill, args.alloc), "cuMemsetD8")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    if args.free:
        check(cuda.cuMemFree_v2(pointer.value), "cuMemFree")
    if args.ready:
        args.ready.write_text(str(pointer.value))
    time.sleep(args.hold)


if __name__ == "__main__":
    main()
