"""The shim, the fake driver and a driver program built with AddressSanitizer and UBSan: every
hook, and several processes sharing the region, must run without a single report."""

from __future__ import annotations

import subprocess

import pytest
from fakegpu import FAKE_DIR, SHIM_DIR, MiB, build_native, build_shim, compiler

from .shimstep import HERE

SANITIZE = (
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=undefined",
)


def _runtime() -> str:
    cc = compiler()
    path = subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    if not path or path == "libasan.so":
        pytest.skip(f"{cc} has no AddressSanitizer runtime")
    return path


def test_hooks_and_shared_accounting_are_clean_under_asan(make_step) -> None:
    asan = _runtime()
    step = make_step(memory=8 * MiB, compute=50)
    shim = build_shim(flags=SANITIZE, name="libsecureml_shim_asan.so")
    headers = (SHIM_DIR / "cuda_api.h", SHIM_DIR / "nvml_api.h", FAKE_DIR / "fake_common.h")
    fake = build_native(
        "libcuda.so.1",
        [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic", *SANITIZE),
        headers=headers,
    )
    driver = build_native(
        "shim_driver_asan",
        [HERE / "shim_driver.c"],
        flags=(f"-I{SHIM_DIR}", f"-L{fake.parent}", *SANITIZE),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )
    env = step.env(
        LD_PRELOAD=f"{asan}:{shim}",
        LD_LIBRARY_PATH=f"{fake.parent}:{step.gpu.lib_dir}",  # sanitized libcuda, fake NVML
        ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=99",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
    )

    def run(*batch: list[str]) -> None:
        procs = [
            subprocess.Popen(
                [str(driver), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in batch
        ]
        for args, proc in zip(batch, procs, strict=True):
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and "Sanitizer" not in err and "runtime error" not in err, (
                args,
                err,
            )

    run(["hooks"])
    run(["stress", "400", "1", str(MiB)], ["stress", "400", "2", str(MiB)], ["launch", "0.3"])
    run(["fill", str(MiB)])
