"""Compile Kubeflow Pipelines' own sample pipelines with secureml and say why each failure fails.

    python scripts/compile_kfp_samples.py DIR [--profile examples/profiles/permissive.yaml] [--json OUT]

DIR is a checkout of kubeflow/pipelines' `test_data/sdk_compiled_pipelines/valid` (release-2.17;
not part of this repository). Every `.py` file is imported; each top-level pipeline in it is
compiled with plain kfp and with secureml. A file counts as compiled when secureml compiles all
of its pipelines. Failures are grouped by cause: the rule ids secureml reported, or the error.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import sys
import tempfile
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from secureml.compile.compiler import CompileError, compile_pipeline  # noqa: E402
from secureml.compile.pipeline_loader import pipelines_in, top_level  # noqa: E402
from secureml.core.errors import SecuremlError  # noqa: E402
from secureml.profile.model import load_profile  # noqa: E402


def _plain_kfp(pipeline) -> str | None:
    from kfp import compiler

    with tempfile.TemporaryDirectory() as tmp:
        try:
            compiler.Compiler().compile(pipeline, str(Path(tmp) / "p.yaml"))
        except Exception as err:  # noqa: BLE001 - kfp's own failure, reported as such
            return f"{type(err).__name__}: {err}"
    return None


def compile_file(path: Path, profile) -> dict:
    """One sample file: its pipelines and, for each, 'ok' or why not."""
    quiet = io.StringIO()
    try:
        with redirect_stdout(quiet), redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = top_level(pipelines_in(path))
    except SecuremlError as err:
        return {
            "file": str(path),
            "ok": False,
            "cause": "import: " + err.what.splitlines()[0][:200],
        }
    results = {}
    for name, pipeline in sorted(found.items()):
        kfp_error = _plain_kfp(pipeline)
        try:
            with redirect_stdout(quiet), redirect_stderr(quiet), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile_pipeline(pipeline, profile)
            results[name] = "ok"
        except CompileError as err:
            rules = sorted({v.rule for v in err.violations})
            results[name] = "rules: " + ", ".join(rules) + " | " + err.violations[0].what[:160]
        except SecuremlError as err:
            results[name] = "error: " + err.what.splitlines()[0][:200]
        except Exception as err:  # noqa: BLE001 - a crash is a finding to report, not to hide
            results[name] = f"crash: {type(err).__name__}: {str(err)[:200]}"
        if kfp_error and results[name] != "ok":
            results[name] += f" (plain kfp fails too: {kfp_error[:120]})"
    ok = all(result == "ok" for result in results.values())
    return {"file": str(path), "ok": ok, "pipelines": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--profile", type=Path, default=ROOT / "examples" / "profiles" / "permissive.yaml"
    )
    parser.add_argument("--json", type=Path, help="write every file's result as JSON")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    files = sorted(p for p in args.folder.rglob("*.py") if p.name != "__init__.py")
    results = [compile_file(path, profile) for path in files]
    compiled = sum(r["ok"] for r in results)
    print(
        f"{compiled}/{len(results)} sample files compile with secureml (profile {profile.metadata.name})"
    )
    causes: collections.Counter[str] = collections.Counter()
    for result in results:
        if result["ok"]:
            continue
        relative = Path(result["file"]).relative_to(args.folder)
        if "cause" in result:
            print(f"  {relative}: {result['cause']}")
            causes[result["cause"].split(":")[0]] += 1
            continue
        for name, outcome in result["pipelines"].items():
            if outcome != "ok":
                print(f"  {relative} [{name}]: {outcome}")
                causes[outcome.split(" | ")[0].split(" (")[0][:80]] += 1
    if causes:
        print("failures by cause:")
        for cause, count in causes.most_common():
            print(f"  {count:3d}  {cause}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
