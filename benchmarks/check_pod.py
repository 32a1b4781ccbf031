"""check-pod throughput: pods per second on one core, against plain YAML parsing of the same pods.

Pods: the attack corpus and the allowed pods of tests/rules (secureml step pods with a launcher init
container, labels, annotations), repeated to N. Measured in one run, pinned to one core:

- baseline: parsing the same pods from YAML (the loader check-pod uses);
- in-process `evaluate` with Pod Security restricted, and with a full profile (team-a);
- the CLI end to end (`secureml check-pod FILE --level restricted` / `--profile`), interpreter
  start, imports and rule compilation included.

Rates are given per CPU second of the measuring process (children's for the CLI), which is what one
core delivers, and per wall second (lower when other work shares the core). Target: >= 1,000 pods/s
for restricted in process. Prints; never asserts.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from secureml.profile import load_profile  # noqa: E402
from secureml.rules import evaluate, rules_for_level, rules_for_profile  # noqa: E402
from secureml.workloads import YAML_LOADER  # noqa: E402

N = 1000


def pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})  # the CLI subprocesses inherit it
        return f"pinned to core {core}"
    return "not pinned"


def corpus() -> str:
    folders = [REPO / "tests" / "rules" / "attacks", REPO / "tests" / "rules" / "allowed"]
    texts = [p.read_text() for folder in folders for p in sorted(folder.glob("*.yaml"))]
    return "\n---\n".join(texts[i % len(texts)] for i in range(N))


def measure(fn: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `fn`, best of two runs."""
    best = (float("inf"), float("inf"))
    for _ in range(2):
        cpu, wall = time.process_time(), time.perf_counter()
        fn()
        best = min(best, (time.process_time() - cpu, time.perf_counter() - wall))
    return best


def measure_cli(args: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(args, capture_output=True, cwd=REPO)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode in (0, 1), done.stderr.decode()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, wall


def main() -> None:
    where = pin_one_core()
    text = corpus()
    pods = list(yaml.load_all(text, Loader=YAML_LOADER))
    restricted = rules_for_level("restricted")
    profile_path = REPO / "profiles" / "team-a.yaml"
    full = rules_for_profile(load_profile(profile_path))
    evaluate(pods[0], full)  # compile every expression once, as the CLI does on first use

    results = {
        "baseline: YAML parse": measure(lambda: list(yaml.load_all(text, Loader=YAML_LOADER))),
        "evaluate, --level restricted": measure(lambda: [evaluate(p, restricted) for p in pods]),
        "evaluate, --profile team-a": measure(lambda: [evaluate(p, full) for p in pods]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pods.yaml"
        path.write_text(text)
        cli = [sys.executable, "-m", "secureml", "check-pod", str(path), "--format", "json"]
        results["CLI end to end, restricted"] = measure_cli([*cli, "--level", "restricted"])
        results["CLI end to end, team-a"] = measure_cli([*cli, "--profile", str(profile_path)])

    print(
        f"check-pod: {N} pods, {where}; {len(restricted)} rules restricted, {len(full)} for team-a"
    )
    print(f"  {'':32} {'pods/CPU-s':>11} {'pods/wall-s':>12} {'vs YAML parse (CPU)':>20}")
    base = N / results["baseline: YAML parse"][0]
    for name, (cpu, wall) in results.items():
        print(f"  {name:32} {N / cpu:11.0f} {N / wall:12.0f} {N / cpu / base:19.2f}x")
    rate = N / results["evaluate, --level restricted"][0]
    print(
        f"  target >= 1,000 pods/s restricted in process, one core: {'met' if rate >= 1000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
