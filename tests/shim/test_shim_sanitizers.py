"""The shim, the fake driver and fake NVML, and the driver programs, built with sanitizers: every
run must end without a single report (issue 35).

- AddressSanitizer + UBSan: every hook; processes sharing the region; 8 threads freeing each other's
  blocks with membarrier (the allocation table's lock-free owner protocol) and without it (a seccomp
  filter refuses it: the spin lock from the start); the compute limit (NVML's utilisation); the
  reconciliation of a SIGKILLed process's charge with NVML; the stopped-holder give-up.
- ThreadSanitizer: the same concurrency in one process (threads, membarrier on and off), every hook,
  and processes in parallel. TSan sees one process at a time: what processes share through the
  region is the stress tests' and the lock tests' to prove (test_shim_concurrency.py).
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fakegpu import FAKE_DIR, SHIM_DIR, MiB, build_native, build_shim, compiler

from .shimstep import HERE

ASAN = (
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=undefined",
)
# -Wno-tsan: gcc says TSan does not model atomic_thread_fence; the shim's one fence orders its own
# store before the driver's writes, which no thread of the process reads.
TSAN = ("-fsanitize=thread", "-fno-omit-frame-pointer", "-g", "-O1", "-Wno-tsan")
OPTIONS = {
    "asan": {
        "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=99",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    },
    "tsan": {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1"},
}
RUNTIME = {"asan": "libasan.so", "tsan": "libtsan.so"}


def _runtime(kind: str) -> str:
    cc = compiler()
    name = RUNTIME[kind]
    path = subprocess.run(
        [cc, f"-print-file-name={name}"], capture_output=True, text=True
    ).stdout.strip()
    if not path or path == name:
        pytest.skip(f"{cc} has no {name}")
    return path


@dataclass
class Sanitized:
    """One sanitizer's builds: shim, fake libcuda.so.1 and libnvidia-ml.so.1, the driver program."""

    kind: str
    runtime: str
    shim: Path
    lib_path: str
    driver: Path
    no_membarrier: Path

    def env(self, step, **extra: str) -> dict[str, str]:
        preload = f"{self.runtime}:{self.shim}" if self.kind == "asan" else str(self.shim)
        return step.env(
            LD_PRELOAD=preload,
            LD_LIBRARY_PATH=self.lib_path,  # the sanitized fakes
            **OPTIONS[self.kind],
            **extra,
        )

    def popen(self, step, args: list[str], *, membarrier: bool = True, **extra: str):
        command = [str(self.driver), *args]
        if not membarrier:
            command = [str(self.no_membarrier), *command]
        return subprocess.Popen(
            command,
            env=self.env(step, **extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, step, *batch: list[str], membarrier: bool = True, **extra: str) -> list[str]:
        """Runs each argument list as a driver process, all at once; returns their stderr."""
        procs = [self.popen(step, args, membarrier=membarrier, **extra) for args in batch]
        errors = []
        for args, proc in zip(batch, procs, strict=True):
            _, err = proc.communicate(timeout=180)
            clean = "Sanitizer" not in err and "runtime error" not in err
            assert proc.returncode == 0 and clean, (self.kind, args, err[-6000:])
            errors.append(err)
        return errors


def _build(kind: str) -> Sanitized:
    runtime = _runtime(kind)
    flags = ASAN if kind == "asan" else TSAN
    headers = (
        SHIM_DIR / "cuda_api.h",
        SHIM_DIR / "nvml_api.h",
        FAKE_DIR / "fake_common.h",
        FAKE_DIR / "fake_nvml_events.h",
    )
    cuda = build_native(
        "libcuda.so.1",
        [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic", *flags),
        headers=headers,
    )
    nvml = build_native(
        "libnvidia-ml.so.1",
        [FAKE_DIR / "fake_nvml.c", FAKE_DIR / "fake_nvml_events.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libnvidia-ml.so.1", "-Wl,-Bsymbolic", *flags),
        headers=headers,
    )
    driver = build_native(
        f"shim_driver_{kind}",
        [HERE / "shim_driver.c"],
        flags=(f"-I{SHIM_DIR}", f"-L{cuda.parent}", *flags),
        headers=(SHIM_DIR / "cuda_api.h",),
        libs=("-l:libcuda.so.1",),
    )
    return Sanitized(
        kind=kind,
        runtime=runtime,
        shim=build_shim(flags=flags, name=f"libsecureml_shim_{kind}.so"),
        lib_path=f"{cuda.parent}:{nvml.parent}",
        driver=driver,
        no_membarrier=build_native("no_membarrier", [HERE / "no_membarrier.c"]),
    )


def _threads(s: Sanitized, step) -> None:
    """8 threads freeing each other's blocks, with membarrier and without (the log says which)."""
    on, off = (
        s.run(
            step,
            ["threads", "8", "2000", str(seed), str(2 * MiB)],
            membarrier=membarrier,
            SECUREML_SHIM_LOG_LEVEL="debug",
        )[0]
        for seed, membarrier in ((11, True), (12, False))
    )
    assert "membarrier unavailable" not in on
    assert "membarrier unavailable" in off


def test_hooks_and_shared_accounting_are_clean_under_asan(make_step) -> None:
    s = _build("asan")
    step = make_step(memory=8 * MiB, compute=50)
    s.run(step, ["hooks"])
    s.run(
        step, ["stress", "400", "1", str(MiB)], ["stress", "400", "2", str(MiB)], ["launch", "0.3"]
    )
    s.run(step, ["fill", str(MiB)])
    _threads(s, make_step(memory=24 * MiB, device_memory=128 * MiB, scrub=False))
    # A SIGKILLed process's charge, released by the reconciliation with (sanitized) NVML.
    gone = make_step(memory=16 * MiB, scrub=False)
    holder = s.popen(gone, ["hold", str(8 * MiB)])
    assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    s.run(gone, ["try", str(12 * MiB)])
    assert gone.counters()["reclaimed"] == 8 * MiB


def test_the_stopped_holder_give_up_is_clean_under_asan(make_step) -> None:
    from .test_shim_concurrency import _lock_holder

    s = _build("asan")
    step = make_step(memory=8 * MiB)
    s.run(step, ["fill", str(MiB)])
    holder = _lock_holder(step, "live")
    try:
        holder.send_signal(signal.SIGSTOP)
        (err,) = s.run(step, ["try", str(MiB)], SECUREML_SHIM_LOG_LEVEL="error")
        assert "is stopped" in err
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()


def test_concurrency_is_clean_under_tsan(make_step) -> None:
    s = _build("tsan")
    _threads(s, make_step(memory=24 * MiB, device_memory=128 * MiB, scrub=False))
    step = make_step(memory=8 * MiB, compute=50)
    s.run(step, ["hooks"])
    s.run(
        step, ["stress", "300", "3", str(MiB)], ["stress", "300", "4", str(MiB)], ["launch", "0.3"]
    )
