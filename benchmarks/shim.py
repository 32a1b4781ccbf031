"""Cost of the quota shim per intercepted operation, against the fake CUDA driver alone.

Runs tests/shim/shim_driver.c's `bench` mode in the same run with and without the shim preloaded:
a 4 KiB cuMemAlloc_v2 + cuMemFree_v2 pair, a cuLaunchKernel, a cuMemGetInfo_v2; in one process and
in 8 contending processes sharing one step's accounting. The fake driver is given a cost of its own
(`call_ns`: a busy wait in each allocation and each free) so that its alloc+free pair costs about
what a real driver's does (~150-200 ns on an idle machine), not nothing. Configurations run in rotation, REPEATS times;
each run's figure is the median over its processes. Prints min / median / max of the runs, the
median added by the shim and the ratio. Targets (uncontended): <= 100 ns added per alloc+free,
<= 10 ns per launch, <= 100 ns per cuMemGetInfo. Kernels take no simulated time here, so a launch
measures the interception, not the pacing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fakegpu import SHIM_DIR, FakeDevice, FakeGPU, build_native, build_shim  # noqa: E402

CALLS = {1: 200_000, 8: 100_000}
CONTENDERS = 8
REPEATS = {1: 7, 8: 3}
DRIVER_CALL_NS = 30  # the fake's own cost per allocation and per free (plus its bookkeeping)
OPS = (("alloc", "alloc+free"), ("launch", "launch"), ("info", "cuMemGetInfo"))
TARGET = {"alloc": 100.0, "launch": 10.0, "info": 100.0}


def _run(driver: Path, env: dict[str, str], what: str, processes: int) -> float:
    """Median over the processes of their ns per operation; all start timing at the same instant.
    Uncontended: the median over batches of 1000 of the process's CPU time per operation (time it
    was preempted on a shared machine does not count); contended: each process's wall-clock time
    for its whole run (waiting for the others is the point)."""
    start = time.monotonic_ns() + 300_000_000  # after every process has started and warmed up
    procs = [
        subprocess.Popen(
            [str(driver), "bench", str(CALLS[processes]), what, str(start)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    key = "cpu_ns_per_op" if processes == 1 else "ns_per_op"
    results = [json.loads(p.communicate(timeout=120)[0])[key] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return statistics.median(results)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        gpu = FakeGPU(
            root / "gpu", [FakeDevice(memory=1 << 30)], kernel_us=0, call_ns=DRIVER_CALL_NS
        )
        driver = build_native(
            "shim_driver",
            [REPO / "tests" / "shim" / "shim_driver.c"],
            flags=(f"-I{SHIM_DIR}", f"-L{gpu.lib_dir}"),
            headers=(SHIM_DIR / "cuda_api.h",),
            libs=("-l:libcuda.so.1",),
        )
        shim = build_shim()
        envs = {"driver": gpu.env()}
        for name, scrub, compute in (
            ("shim", 0, 100),
            ("shim+scrub", 1, 100),
            ("shim+compute50", 0, 50),
        ):
            limits = root / f"limits-{name}"
            limits.write_text(
                f"version=1\nmemory={1 << 30}\ncompute={compute}\nscrub_on_free={scrub}\n"
            )
            env = gpu.env()
            env.update(
                LD_PRELOAD=str(shim),
                SECUREML_SHIM_LIMITS_FILE=str(limits),
                SECUREML_SHIM_COUNTERS_FILE=str(root / f"counters-{name}"),  # as in a real step
            )
            envs[name] = env
        print("ns per operation against the fake driver alone (one run: with and without the shim)")
        print(f"the fake's own cost: {DRIVER_CALL_NS} ns busy wait per allocation and per free")
        print(
            f"{'mode':<16}{'procs':>6}{'operation':>14}{'driver min/med/max':>24}"
            f"{'shim min/med/max':>24}{'added':>8}{'ratio':>7}{'target':>8}"
        )
        for processes in (1, CONTENDERS):
            for what, label in OPS:
                runs: dict[str, list[float]] = {name: [] for name in envs}
                for _ in range(REPEATS[processes]):  # rotation: load changes hit all alike
                    for name, env in envs.items():
                        runs[name].append(_run(driver, env, what, processes))
                base = runs.pop("driver")
                base_med = statistics.median(base)
                for name, figures in runs.items():
                    med = statistics.median(figures)
                    added = med - base_med
                    target = TARGET[what] if processes == 1 and name == "shim" else None
                    verdict = "" if target is None else ("ok" if added <= target else "MISSED")
                    print(
                        f"{name:<16}{processes:>6}{label:>14}"
                        f"{min(base):>8.1f}{base_med:>8.1f}{max(base):>8.1f}"
                        f"{min(figures):>8.1f}{med:>8.1f}{max(figures):>8.1f}"
                        f"{added:>8.1f}{med / base_med:>7.2f}{verdict:>8}"
                    )


if __name__ == "__main__":
    main()
