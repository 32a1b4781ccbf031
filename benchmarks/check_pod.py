"""check-pod throughput on the pods the compiler really produces, and where the time goes.

Pods: 1,000 distinct step pods of benchmarks/chain.py (ten pipelines of 100 steps, compiled for
profiles/team-a.yaml): KFP's executor pods with Argo's init and wait containers, the launcher's
environment and the inlined component source, about 6 KB each. The file holds them as Argo submits
them (`preview_pods(..., mutate=False)`); `check-pod` applies the Pod API defaults and the tenant's
mutating policy itself. In process the compiler's case is measured: `evaluate` on the pods as
previewed (mutated), with Pod Security restricted and with team-a's rules.

Measured in one run, pinned to one core, each as pods per CPU-second (min/median/max of the runs):

- the parts: YAML parsing (libyaml's CSafeLoader, and `secureml.core.yaml_stream`, which check-pod reads
  with: yaml_rs where it reads as PyYAML does, else PyYAML), the admitted pod
  (`as_created`: defaults, mutations, validity), `evaluate` by the fast path and by the plain path
  (`evaluate_plain`, the Rust engine alone: the baseline the fast path replaced);
- the CLI end to end (`secureml check-pod FILE --level restricted` / `--profile team-a.yaml`),
  interpreter start, imports and rule compilation included, against the plain YAML parse of the
  same file in this process.

Targets (issue 14): CLI >= 1,000 (restricted) and >= 600 (team-a) pods per CPU-second; in process
>= 3,000 and >= 1,200. Run: `python benchmarks/check_pod.py`. Prints; never asserts.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from chain import chained  # noqa: E402
from kfp import dsl  # noqa: E402

from secureml.compile.compiler import _documents, compile_pipeline  # noqa: E402
from secureml.core.yaml_stream import PYYAML_LOADER, load_all  # noqa: E402
from secureml.pods.admitted import as_created  # noqa: E402
from secureml.pods.preview import preview_pods  # noqa: E402
from secureml.profile.model import load_profile  # noqa: E402
from secureml.rules import (  # noqa: E402
    evaluate,
    rules_for_level,
    rules_for_profile,
    verdict_memo,
)
from secureml.rules.engine import evaluate_plain  # noqa: E402

PIPELINES, STEPS = 10, 100
N = PIPELINES * STEPS
RUNS = 3
PROFILE_PATH = REPO / "profiles" / "team-a.yaml"


def pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})  # the CLI subprocesses inherit it
        return f"pinned to core {core}"
    return "not pinned"


def step_pods(profile: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(as Argo submits them, as previewed after the tenant's mutations): N distinct pods."""
    submitted, previewed = [], []
    for index in range(PIPELINES):
        pipeline = dsl.pipeline(name=f"chain-{index}")(chained(STEPS))
        compiled = compile_pipeline(pipeline, profile, check_admission=False)
        assert compiled.component is not None
        documents = _documents(compiled.component)
        submitted += preview_pods(documents, profile, mutate=False).values()
        previewed += preview_pods(documents, profile).values()
    return submitted, previewed


def rates(count: int, fn: Callable[[], object], runs: int = RUNS) -> list[float]:
    """Items per CPU-second of `fn`, once per run; each run starts with no verdict kept (the
    engine keeps verdicts by what a rule reads: a second pass over the same pods would find them
    all kept, which no real caller does)."""
    out = []
    for _ in range(runs):
        verdict_memo.forget()
        cpu = time.process_time()
        fn()
        out.append(count / (time.process_time() - cpu))
    return out


def cli_rates(args: list[str], runs: int = RUNS) -> list[float]:
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(args, capture_output=True, cwd=REPO)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert done.returncode in (0, 1), done.stderr.decode()
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        out.append(N / cpu)
    return out


def show(name: str, values: list[float], base: float | None) -> None:
    median = statistics.median(values)
    spread = f"{min(values):8.0f} {median:8.0f} {max(values):8.0f}"
    ratio = f"{median / base:8.2f}x" if base else ""
    print(f"  {name:44} {spread} {ratio}")


def main() -> None:
    where = pin_one_core()
    profile = load_profile(PROFILE_PATH)
    submitted, previewed = step_pods(profile)
    text = yaml.dump_all(submitted, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    restricted = rules_for_level("restricted")
    full = rules_for_profile(profile)
    for rules in (restricted, full):  # compile every expression once, as the CLI does on first use
        evaluate(previewed[0], rules)
        evaluate_plain(previewed[0], rules)
    print(
        f"check-pod: {N} step pods ({len(text) // N} bytes each as YAML), {where}, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print(f"  {len(restricted)} rules restricted, {len(full)} for team-a")
    print(f"  {'pods per CPU-second':44} {'min':>8} {'median':>8} {'max':>8} {'ratio':>9}")
    parse = rates(N, lambda: list(yaml.load_all(text, Loader=PYYAML_LOADER)))
    show("YAML parse, CSafeLoader (baseline)", parse, None)
    base = statistics.median(parse)
    show(
        "YAML parse, secureml.core.yaml_stream (check-pod's)",
        rates(N, lambda: load_all(text)),
        base,
    )
    show(
        "as_created (defaults, mutations, validity)",
        rates(N, lambda: [as_created(p, profile) for p in submitted]),
        base,
    )
    for label, rules in (("restricted", restricted), ("team-a", full)):
        plain = rates(N, lambda r=rules: [evaluate_plain(p, r) for p in previewed], 1)
        show(f"evaluate_plain (Rust engine), {label}", plain, base)
        fast = rates(N, lambda r=rules: [evaluate(p, r) for p in previewed])
        show(f"evaluate (fast path), {label}", fast, base)
        print(f"  {'':44} fast / plain: {statistics.median(fast) / plain[0]:.1f}x")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pods.yaml"
        path.write_text(text)
        cli = [sys.executable, "-m", "secureml", "check-pod", str(path), "--format", "json"]
        show("CLI end to end, --level restricted", cli_rates([*cli, "--level", "restricted"]), base)
        show(
            "CLI end to end, --profile team-a",
            cli_rates([*cli, "--profile", str(PROFILE_PATH)]),
            base,
        )
    print(
        "  targets: CLI >= 1,000 restricted, >= 600 team-a; in process >= 3,000 / >= 1,200; load "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )


if __name__ == "__main__":
    main()
