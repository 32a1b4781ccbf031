"""secureml compile against plain kfp compile of the same chained pipeline (10, 100, 500 steps).

Both sides start from the same pipeline function and end with the YAML file on disk:

- kfp:      `@dsl.pipeline` (kfp traces and builds the spec) + `kfp.compiler.Compiler().compile`
- secureml: `@dsl.pipeline` + `secureml.compiler.compile_pipeline(...)` (checks every task,
            re-traces it with the controls, builds, previews every pod and evaluates the tenant's
            admission rules on it) + writing the YAML; and the same without the admission preview
            (`check_admission=False`), to show where the time goes

Each side is timed several times in this one run, alternating; the ratio of the medians is
printed. Target: <= 1.25x. Run: `python benchmarks/compile.py` (well under a minute).
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kfp import compiler, dsl  # noqa: E402

from secureml import MIG, secure_component  # noqa: E402
from secureml.compiler import compile_pipeline  # noqa: E402
from secureml.profile import load_profile  # noqa: E402

IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "0" * 64
PROFILE = load_profile(ROOT / "examples" / "profiles" / "team-a-dev.yaml")
RUNS = {10: 5, 100: 3, 500: 1}


@secure_component(image=IMAGE)
def prepare(x: int) -> int:
    return x + 1


@secure_component(image=IMAGE, gpu=MIG("1g.10gb"))
def train(x: int) -> int:
    return x * 2


def chained(steps: int):
    def pipeline(x: int = 0) -> None:
        value = x
        for index in range(steps):
            value = (train if index % 2 else prepare)(x=value).output

    return pipeline


def time_kfp(steps: int, out: Path) -> float:
    start = time.perf_counter()
    compiler.Compiler().compile(dsl.pipeline(name="chain")(chained(steps)), str(out))
    return time.perf_counter() - start


def time_secureml(steps: int, out: Path, admission: bool = True) -> float:
    start = time.perf_counter()
    compile_pipeline(
        dsl.pipeline(name="chain")(chained(steps)), PROFILE, check_admission=admission
    ).write(out)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pipeline.yaml"
        time_secureml(10, out)  # warm the caches both sides share (imports, CEL programs)
        time_kfp(10, out)
        print(
            f"{'steps':>6} {'kfp s':>8} {'secureml s':>11} {'ratio':>6}   {'without admission preview':>26}"
        )
        for steps, runs in RUNS.items():
            kfp_times, secure_times, bare_times = [], [], []
            for _ in range(runs):
                kfp_times.append(time_kfp(steps, out))
                secure_times.append(time_secureml(steps, out))
                bare_times.append(time_secureml(steps, out, admission=False))
            kfp_median = statistics.median(kfp_times)
            secure_median, bare_median = (
                statistics.median(secure_times),
                statistics.median(bare_times),
            )
            print(
                f"{steps:>6} {kfp_median:>8.2f} {secure_median:>11.2f} {secure_median / kfp_median:>5.2f}x"
                f"   {bare_median:>19.2f} s {bare_median / kfp_median:>4.2f}x"
            )
    print("target: <= 1.25x (the first ratio: what `secureml compile` does)")


if __name__ == "__main__":
    main()
