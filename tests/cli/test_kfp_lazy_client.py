"""`secureml compile` imports kfp without its API client (`secureml._kfp.lazy_client`): the same
YAML as with kfp imported whole, `kfp.Client` still there for a pipeline file that names it, and
kfp's runtime switch left as it was."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.processes import REPO, run_source

# Runs the program as the console script does (`kfp` imported first, whole, where asked), then
# prints which of kfp's client modules the process imported.
PROBE = """
import atexit, json, sys
if sys.argv[1] == "whole":
    import kfp
CLIENT = lambda m: m == "kfp.client" or m.startswith("kfp_server_api")
atexit.register(lambda: print(json.dumps(sorted(filter(CLIENT, sys.modules))), file=sys.stderr))
sys.argv = ["secureml", *sys.argv[2:]]
from secureml.cli.program import main
main()
"""


def compile_in_process(kfp: str, pipeline: Path, output: Path) -> list[str]:
    """Compile `pipeline` for team-a-dev in a new process; the client modules it imported."""
    profile = "examples/profiles/team-a-dev.yaml"
    done = run_source(PROBE, kfp, "compile", str(pipeline), "--profile", profile, "-o", str(output))
    assert done.returncode == 0, done.stderr
    imported: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return imported


def test_compile_leaves_the_client_unimported_and_writes_the_same_yaml(tmp_path: Path) -> None:
    pipeline = REPO / "pipelines" / "secure_finetune.py"
    lazy = compile_in_process("lazy", pipeline, tmp_path / "lazy.yaml")
    whole = compile_in_process("whole", pipeline, tmp_path / "whole.yaml")
    assert lazy == []
    assert "kfp.client" in whole and len(whole) > 50
    assert (tmp_path / "lazy.yaml").read_bytes() == (tmp_path / "whole.yaml").read_bytes()


def test_a_pipeline_file_that_names_kfp_client_gets_kfps_class(tmp_path: Path) -> None:
    source = (REPO / "pipelines" / "secure_finetune.py").read_text()
    pipeline = tmp_path / "with_client.py"
    pipeline.write_text(
        source + "\n\nimport kfp\n\nassert kfp.Client.__module__ == 'kfp.client.client'\n"
    )
    assert "kfp.client" in compile_in_process("lazy", pipeline, tmp_path / "p.yaml")


def test_import_kfp_puts_kfps_runtime_switch_back() -> None:
    check = """
import os, sys
{preset}
from secureml._kfp.lazy_client import import_kfp
import_kfp()
import kfp
print(os.environ.get("_KFP_RUNTIME"), "kfp.client" in sys.modules,
      hasattr(kfp.dsl, "pipeline"), hasattr(kfp.components, "load_component_from_text"))
"""
    for preset, switch in (("", "None"), ("os.environ['_KFP_RUNTIME'] = 'x'", "x")):
        done = run_source(check.format(preset=preset), timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [switch, "False", "True", "True"]
