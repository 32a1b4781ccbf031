"""CLI start-up: wall time of `secureml --help` and of `secureml check-pod` on one pod.

Each command runs RUNS times as a whole process (interpreter start and imports included), the way a
user or a CI step runs it, after one warm-up run that fills the OS file cache. Targets (issue 14):
`--help` under 0.3 s, `check-pod` on one pod under 0.6 s. Also lists which heavy libraries
(kfp, sigstore, grpc, cel, rich, pydantic, ...) `--help` imports: it should import none.
Prints min/median/max; never asserts.

`--src DIR` measures the checkout in DIR instead (e.g. `git archive <commit> | tar -x -C DIR`, for
a before/after figure): the editable install's import hook would win over PYTHONPATH, so the
interpreter then runs with `-S` and `sys.path` = [DIR, site-packages].
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = 10
POD = REPO / "tests" / "rules" / "allowed" / "team-a-cpu.yaml"
PROFILE = REPO / "profiles" / "team-a.yaml"
HEAVY = ("kfp", "sigstore", "grpc", "celpy", "cel", "rich", "pydantic", "kubernetes", "yaml")
REPORT_MODULES = (
    "import atexit, sys; atexit.register(lambda: print(*sorted(sys.modules), file=sys.stderr)); "
)


# The console script's entry point (a checkout from before it existed: the app itself).
MAIN = (
    "\ntry:\n    from secureml.cli.program import main\n"
    "except ImportError:\n    from secureml.cli import app as main\nmain()"
)


def boot(src: Path | None) -> str:
    """Python source that runs the CLI with sys.argv as given."""
    if src is None:
        return MAIN
    site = [p for p in sys.path if p.endswith("site-packages")]
    return f"import sys; sys.path[:0] = {[str(src), *site]!r}" + MAIN


def command(src: Path | None, probe: bool = False) -> list[str]:
    if src is None and not probe:
        exe = shutil.which("secureml", path=str(Path(sys.executable).parent))
        if exe:
            return [exe]
    flags = ["-S"] if src is not None else []
    prefix = REPORT_MODULES if probe else ""
    return [
        sys.executable,
        *flags,
        "-c",
        prefix + "import sys; sys.argv[0] = 'secureml'; " + boot(src),
    ]


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): CPU time is what an idle machine's wall time
    would be for this single-threaded process, and far less disturbed by other load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spread(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[0]:.3f}/{statistics.median(values):.3f}/{values[-1]:.3f}"


def figures(name: str, argv: list[str], target: float) -> None:
    run_once(argv)  # warm-up
    runs = [run_once(argv) for _ in range(RUNS)]
    print(
        f"{name:42} wall {spread([w for w, _ in runs])}  cpu {spread([c for _, c in runs])} s"
        f"  (min/median/max of {RUNS}; target < {target} s wall)"
    )


def heavy_imports_of_help(src: Path | None) -> list[str]:
    done = subprocess.run(
        [*command(src, probe=True), "--help"], capture_output=True, text=True, check=False
    )
    loaded = {name.split(".")[0] for name in done.stderr.split()}
    return [top for top in HEAVY if top in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, help="measure the checkout in this folder")
    src = parser.parse_args().src
    base = command(src)
    load = os.getloadavg()[0]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), load {load:.2f}, {src or REPO}"
    )
    figures("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"], 0.3)
    figures("secureml --help", [*base, "--help"], 0.3)
    restricted = [*base, "check-pod", str(POD), "--level", "restricted"]
    figures("secureml check-pod POD --level restricted", restricted, 0.6)
    team_a = [*base, "check-pod", str(POD), "--profile", str(PROFILE)]
    figures("secureml check-pod POD --profile team-a", team_a, 0.6)
    print(f"heavy modules imported by --help: {', '.join(heavy_imports_of_help(src)) or 'none'}")


if __name__ == "__main__":
    main()
