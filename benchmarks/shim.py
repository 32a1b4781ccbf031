"""Cost of the quota shim per intercepted operation, against the fake CUDA driver alone.

Runs tests/shim/shim_driver.c's `bench` mode in the same run with and without the shim preloaded:
a 4 KiB cuMemAlloc_v2 + cuMemFree_v2 pair, a cuLaunchKernel, a cuMemGetInfo_v2; in one process and
in 8 contending processes sharing one step's accounting. The fake driver is given a cost of its own
(`call_ns`: a busy wait in each allocation and each free) so that its alloc+free pair costs about
what a real driver's does (~150-200 ns on an idle machine), not nothing.

The machine is shared, so the figure is made robust to its load rather than taken once: the
configurations run interleaved (driver, shim, shim+scrub, shim+compute50, driver, ...), REPEATS
times, so that a change of load hits all of them alike, and each shim run is compared with the
driver run just before it. Per configuration it prints min / median / max of the runs, the added
ns three ways (min vs min, median vs median, and the median of the per-rotation differences, with
their min and max) and the ratio of the medians. A run's figure is CPU time per operation (the
median of 1000-operation batches: time the process was preempted does not count); with 8
processes also wall-clock time per operation (there the scheduler dominates). The verdict
(uncontended, shim without scrub or compute limit) takes the larger of the median-vs-median and
the per-rotation median. `--compare LIBRARY` adds another build of the shim (one built from an
older commit, say) to the rotation, so that before and after come from one run. Last, a cross-check
less exposed to the load: alloc+free within one process (shim_driver.c `abtest`: the shim's hooks,
its copy loaded RTLD_LOCAL, and the bare driver in alternating batches of 500 pairs, so that
whatever else runs slows both alike), the percentiles of the per-batch differences. Targets (issue 35): <= 50
ns added per alloc+free, <= 10 ns per launch, <= 100 ns per cuMemGetInfo. The load average is
printed before and after. Kernels take no simulated time here, so a launch measures the
interception, not the pacing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.fakegpu import (  # noqa: E402
    SHIM_DIR,
    FakeDevice,
    FakeGPU,
    build_native,
    build_shim,
)

CALLS = {1: 200_000, 8: 100_000}
CONTENDERS = 8
REPEATS = {1: 15, 8: 7}
AB_BATCHES = 2000
AB_REPEATS = 3
DRIVER_CALL_NS = 30  # the fake's own cost per allocation and per free (plus its bookkeeping)
OPS = (("alloc", "alloc+free"), ("launch", "launch"), ("info", "cuMemGetInfo"))
TARGET = {"alloc": 50.0, "launch": 10.0, "info": 100.0}


def _run(driver: Path, env: dict[str, str], what: str, processes: int) -> dict[str, float]:
    """Medians over the processes of their ns per operation: `cpu`, the median over batches of 1000
    of the process's CPU time per operation (time it was preempted on a shared machine does not
    count; spinning for the step's lock does), and `wall`, its wall-clock time for the whole run
    (with 8 processes waiting for the others is the point: they all start at the same instant)."""
    start = 0 if processes == 1 else time.monotonic_ns() + 300_000_000  # after all started
    procs = [
        subprocess.Popen(
            [str(driver), "bench", str(CALLS[processes]), what, str(start)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return {
        "cpu": statistics.median(r["cpu_ns_per_op"] for r in results),
        "wall": statistics.median(r["ns_per_op"] for r in results),
    }


def _abtest(driver: Path, env: dict[str, str], library: Path) -> dict[str, float]:
    """tests/shim/shim_driver.c's `abtest`: the shim's hooks and the bare driver in one process,
    batches alternating, so that the machine's load slows both alike."""
    out = subprocess.run(
        [str(driver), "abtest", str(AB_BATCHES), str(library)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _spread(values: list[float]) -> str:
    return f"{min(values):7.1f}{statistics.median(values):7.1f}{max(values):7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, help="rotations per measurement (default 15 / 7)")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="LIBRARY",
        help="another build of the shim (e.g. an older commit's) measured in the same rotation",
    )
    args = parser.parse_args()
    repeats = {n: args.repeats or r for n, r in REPEATS.items()}
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
        libraries = {"shim": build_shim()}
        if args.compare:
            libraries["compare"] = args.compare.resolve()
        envs = {"driver": gpu.env()}
        for (name, scrub, compute), (prefix, library) in itertools.product(
            (("", 0, 100), ("+scrub", 1, 100), ("+compute50", 0, 50)), libraries.items()
        ):
            name = prefix + name
            limits = root / f"limits-{name}"
            limits.write_text(
                f"version=1\nmemory={1 << 30}\ncompute={compute}\nscrub_on_free={scrub}\n"
            )
            env = gpu.env()
            env.update(
                LD_PRELOAD=str(library),
                SECUREML_SHIM_LIMITS_FILE=str(limits),
                SECUREML_SHIM_COUNTERS_FILE=str(root / f"counters-{name}"),  # as in a real step
            )
            envs[name] = env
        print("ns per operation against the fake driver alone (one run: with and without the shim)")
        print(f"the fake's own cost: {DRIVER_CALL_NS} ns busy wait per allocation and per free")
        print(f"runs interleaved, {repeats[1]} (1 process) / {repeats[8]} (8) each; {_load()}")
        print(
            f"{'mode':<18}{'procs':>8}{'operation':>13} {'driver min/med/max':>21}"
            f" {'shim min/med/max':>21} {'added min-min/med-med':>21}"
            f" {'per rotation min/med/max':>24} {'ratio':>6}{'target':>8}"
        )
        for processes in (1, CONTENDERS):
            for what, label in OPS:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in envs}
                for _ in range(repeats[processes]):  # rotation: load changes hit all alike
                    for name, env in envs.items():
                        runs[name].append(_run(driver, env, what, processes))
                for metric in ("cpu",) if processes == 1 else ("cpu", "wall"):
                    base = [r[metric] for r in runs["driver"]]
                    base_med = statistics.median(base)
                    for name in [n for n in envs if n != "driver"]:
                        figures = [r[metric] for r in runs[name]]
                        med = statistics.median(figures)
                        pairwise = [f - b for f, b in zip(figures, base, strict=True)]
                        added = max(med - base_med, statistics.median(pairwise))
                        target = TARGET[what] if processes == 1 and name == "shim" else None
                        verdict = "" if target is None else ("ok" if added <= target else "MISSED")
                        print(
                            f"{name:<18}{processes:>3} {metric:<4}{label:>13} {_spread(base)}"
                            f" {_spread(figures)} {min(figures) - min(base):10.1f}"
                            f" {med - base_med:10.1f} {_spread(pairwise):>24}"
                            f" {med / base_med:6.2f}{verdict:>8}"
                        )
        print(f"alloc+free within one process, {AB_BATCHES} alternating batches of 500 pairs:")
        for name, library in libraries.items():
            env = dict(envs[name], LD_PRELOAD="")  # the driver program loads this copy itself
            results = [_abtest(driver, env, library) for _ in range(AB_REPEATS)]
            print(
                f"{name:<18} driver {_spread([r['driver_ns'] for r in results])}"
                f"  with {name} {_spread([r['shim_ns'] for r in results])}"
                f"  added: 10th / 50th / 90th percentile of the batches' differences "
                + " / ".join(
                    f"{statistics.median(r[k] for r in results):.1f}"
                    for k in ("added_p10", "added_p50", "added_p90")
                )
            )
        print(_load())


if __name__ == "__main__":
    main()
