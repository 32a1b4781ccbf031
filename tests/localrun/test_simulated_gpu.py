"""`--simulate-gpu`: the launcher's GPU stages against D's fake CUDA driver and NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from secureml.enforcement import simulator
from secureml.gpu.request import MIG, gpu_request_from_dict
from secureml.localrun.runner import RunLayout, fake_machine_for, run_pipeline
from secureml.profile.model import load_profile

from .pipelines import whole_gpu

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    simulator.compiler() is None, reason="no C compiler to build the fake GPU"
)


def _preflight_in(
    env: dict[str, str], request: dict, isolation: str
) -> subprocess.CompletedProcess:
    code = (
        "import json, sys\n"
        "from secureml.gpu.request import decode_gpu_request\n"
        "from secureml.enforcement.preflight import run_preflight\n"
        "print(json.dumps(run_preflight(decode_gpu_request(sys.argv[1], where='test'), isolation=sys.argv[2])))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps(request), isolation],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("request_json", "isolation"),
    [
        ({"kind": "mig", "profile": "1g.10gb", "count": 1}, "mig"),
        ({"kind": "mig", "profile": "2g.20gb", "count": 2}, "mig"),
        ({"kind": "timeslice", "memory": 64 * 2**20, "compute": 25}, "timeslice-shim"),
        ({"kind": "whole", "count": 2, "product": "NVIDIA-H100-80GB-HBM3"}, "dedicated"),
    ],
)
def test_each_simulated_machine_passes_the_real_preflight(
    tmp_path: Path, request_json, isolation
) -> None:
    machine, visible = fake_machine_for(
        gpu_request_from_dict(request_json, where="test"), tmp_path / "gpu"
    )
    env = machine.env()
    env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
    proc = _preflight_in(env, request_json, isolation)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert [d["uuid"] for d in found["devices"]] == visible


def test_a_mig_machine_does_not_pass_for_another_profile(tmp_path: Path) -> None:
    machine, visible = fake_machine_for(MIG("1g.10gb"), tmp_path / "gpu")
    env = machine.env()
    env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
    proc = _preflight_in(env, {"kind": "mig", "profile": "3g.40gb", "count": 1}, "mig")
    assert proc.returncode != 0 and "3g.40gb" in proc.stderr


def test_whole_gpu_step_runs_every_gpu_stage_on_the_fake(tmp_path: Path) -> None:
    profile = load_profile(ROOT / "profiles" / "team-a.yaml")
    layout = RunLayout(tmp_path / "run")
    library_path = os.environ.get("LD_LIBRARY_PATH")
    result = run_pipeline(
        whole_gpu, profile, layout, dev_identity=True, simulate_gpu=True, arguments={"value": 41}
    )
    assert result.succeeded, result.failure
    assert result.steps_without_record == []
    by_step = {r["step"]: r for r in result.records}
    assert set(by_step) == {"on-whole-gpu", "gpu-preflight", "gpu-scrub"}
    assert all(r["exit_code"] == 0 and r["isolation"] == "dedicated" for r in result.records)
    record = by_step["on-whole-gpu"]
    stages = {stage["name"]: stage for stage in record["stages"]}
    assert [
        stages[n]["status"] for n in ("identity", "preflight", "scrub-before", "run", "scrub-after")
    ] == ["ok"] * 5
    assert stages["scrub-before"]["detail"]["coverage"] == 1.0
    assert record["isolation"] == "dedicated"
    assert record["gpu"]["devices"][0]["uuid"].startswith("GPU-")
    assert not list((layout.root / "fakegpu").rglob("*.mem*")), "fake device memory is removed"

    # the library's steps ran as steps of their own, on their own (fake) GPU, and reported
    outputs = layout.pipeline_root
    (preflight,) = [json.loads(p.read_text()) for p in outputs.rglob("gpu-preflight/report")]
    assert preflight["driver_version"] == "550.54.15" and len(preflight["devices"]) == 1
    (scrub,) = [json.loads(p.read_text()) for p in outputs.rglob("gpu-scrub/report")]
    assert scrub["verify"] == "full" and scrub["coverage"] == 1.0
    assert scrub["zeroed_bytes"] == scrub["devices"][0]["total_bytes"]
    from secureml.components.audit_report import render_text, write_reports

    assert "whole x1 (SIMULATED)" in render_text(result.records, simulated_gpu=True)
    # a report made later from the run's audit folder still says the GPU was simulated
    write_reports(layout.audit_dir, tmp_path / "r.md", tmp_path / "r.html", title="later")
    assert "whole x1 (SIMULATED)" in (tmp_path / "r.md").read_text()
    assert os.environ.get("LD_LIBRARY_PATH") == library_path, "the run restores its environment"
