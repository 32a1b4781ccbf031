"""secureml compile against plain kfp compile of the same chained pipeline (10, 100, 300, 500 steps).

Both sides start from the same pipeline function (benchmarks/chain.py) and end with the YAML file
on disk; secureml with the admission preview on (every previewed pod judged by the tenant's rules)
and signature checks off (team-a-dev requires none):

- in process: `@dsl.pipeline` + `kfp.compiler.Compiler().compile` against `@dsl.pipeline` +
  `secureml.compile.compiler.compile_pipeline(...).write`, alternating, in this one process;
- whole processes: `python -c` importing benchmarks/chain.py and compiling it with kfp, against
  `python -m secureml compile benchmarks/chain.py --profile ...`, alternating; their peak memory
  (max RSS of each child, from wait4) too.

Time is CPU time (this process's `process_time`; each child's user + system time from wait4),
the figure that other work on a shared machine moves least; wall time is printed beside it.
Every figure is min / median / max over the runs, and each ratio is secureml's median over kfp's
median of this run; the machine's load average is printed before and after. Target: <= 1.25x in
time at every size, and in peak memory at 500 steps. Run: `python benchmarks/compile.py`
(a few minutes; `--quick` for 10 and 100 steps). Prints; never asserts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from chain import chained  # noqa: E402
from kfp import compiler, dsl  # noqa: E402

from secureml.compile.compiler import compile_pipeline  # noqa: E402
from secureml.profile.model import load_profile  # noqa: E402

PROFILE_PATH = ROOT / "examples" / "profiles" / "team-a-dev.yaml"
PROFILE = load_profile(PROFILE_PATH)
CHAIN = ROOT / "benchmarks" / "chain.py"
RUNS = {10: 25, 100: 7, 300: 3, 500: 3}  # in process, per side (more where a compile takes ~10 ms)
PROCESS_RUNS = {10: 5, 100: 3, 300: 3, 500: 3}
# Each child reports its own peak RSS (VmHWM) at exit: wait4's ru_maxrss would start from this
# process's size, which a forked child inherits.
PEAK = (
    "import atexit, sys; atexit.register(lambda: sys.stderr.write('VmHWM ' + "
    "open('/proc/self/status').read().split('VmHWM:')[1].split()[0] + '\\n')); "
)
KFP_PROCESS = PEAK + (
    "import runpy; from kfp import compiler; "
    "compiler.Compiler().compile(runpy.run_path(sys.argv[1])['chain'], sys.argv[2])"
)
SECUREML_PROCESS = PEAK + (
    "import runpy; sys.argv[0] = 'secureml'; runpy.run_module('secureml', run_name='__main__')"
)


def time_kfp(steps: int, out: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of kfp's compile."""
    cpu, wall = time.process_time(), time.perf_counter()
    compiler.Compiler().compile(dsl.pipeline(name="chain")(chained(steps)), str(out))
    return time.process_time() - cpu, time.perf_counter() - wall


def time_secureml(steps: int, out: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of secureml's compile."""
    cpu, wall = time.process_time(), time.perf_counter()
    compile_pipeline(dsl.pipeline(name="chain")(chained(steps)), PROFILE).write(out)
    return time.process_time() - cpu, time.perf_counter() - wall


def run_process(args: Sequence[str], steps: int) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak RSS in MiB) of one child process."""
    env = {**os.environ, "CHAIN_STEPS": str(steps)}
    start = time.perf_counter()
    process = subprocess.Popen(
        args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    assert process.returncode == 0, f"{args[:3]} exited {process.returncode}: {stderr[-2000:]!r}"
    peak_kib = int(stderr.decode().rsplit("VmHWM ", 1)[1].split()[0])
    return usage.ru_utime + usage.ru_stime, wall, peak_kib / 1024


def spread(values: Sequence[float], unit: str = "s") -> str:
    digits = 3 if unit == "s" else 0
    low, median, high = min(values), statistics.median(values), max(values)
    return f"{low:.{digits}f}/{median:.{digits}f}/{high:.{digits}f} {unit}"


def ratios(baseline: Sequence[float], measured: Sequence[float]) -> str:
    """The ratio of the medians, and the min/median/max of the paired runs' ratios."""
    paired = [m / b for b, m in zip(baseline, measured, strict=True)]
    ratio = statistics.median(measured) / statistics.median(baseline)
    return (
        f"{ratio:.2f}x (pairs {min(paired):.2f}/{statistics.median(paired):.2f}/{max(paired):.2f})"
    )


def alternate(
    runs: int, first: Callable[[], tuple[float, float]], second: Callable[[], tuple[float, float]]
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    a, b = [], []
    for _ in range(runs):
        a.append(first())
        b.append(second())
    return a, b


def row(label: str, kfp: Sequence[float], secureml: Sequence[float], unit: str = "s") -> str:
    return f"{label}  kfp {spread(kfp, unit)}  secureml {spread(secureml, unit)}  {ratios(kfp, secureml)}"


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    sizes = [10, 100] if "--quick" in sys.argv else list(RUNS)
    print(f"compile benchmark, {os.cpu_count()} CPUs, {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        out, kfp_out = Path(tmp) / "secureml.yaml", Path(tmp) / "kfp.yaml"
        time_secureml(10, out)  # warm both sides' caches (imports, compiled CEL programs)
        time_kfp(10, kfp_out)
        print("\nin process (min/median/max; ratio = secureml median / kfp median)")
        for steps in sizes:
            kfp_t, sm_t = alternate(
                RUNS[steps],
                lambda s=steps: time_kfp(s, kfp_out),
                lambda s=steps: time_secureml(s, out),
            )
            print(row(f"  {steps:>4} steps CPU ", [t[0] for t in kfp_t], [t[0] for t in sm_t]))
            print(row("             wall", [t[1] for t in kfp_t], [t[1] for t in sm_t]))
        print("\nwhole processes (CPU, wall and peak RSS, min/median/max; ratios of medians)")
        kfp_args = [sys.executable, "-c", KFP_PROCESS, str(CHAIN), str(kfp_out)]
        sm_args = [sys.executable, "-c", SECUREML_PROCESS, "compile", str(CHAIN)]
        sm_args += ["--profile", str(PROFILE_PATH), "-o", str(out)]
        for steps in sizes:
            pairs = [
                (run_process(kfp_args, steps), run_process(sm_args, steps))
                for _ in range(PROCESS_RUNS[steps])
            ]
            kfp_p, sm_p = [p[0] for p in pairs], [p[1] for p in pairs]
            print(row(f"  {steps:>4} steps CPU ", [p[0] for p in kfp_p], [p[0] for p in sm_p]))
            print(row("             wall", [p[1] for p in kfp_p], [p[1] for p in sm_p]))
            print(row("             peak RSS", [p[2] for p in kfp_p], [p[2] for p in sm_p], "MiB"))
    print(f"\n{load()}; target: <= 1.25x in time at every size, in peak memory at 500 steps")


if __name__ == "__main__":
    main()
