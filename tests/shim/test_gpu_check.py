"""scripts/gpu-check.sh's CPU-only dry run (`--fake`): the prepared check for a machine with a real
GPU builds here, runs every step over the fake driver in well under 5 minutes, and writes one JSON
whose checks hold (the figures of a fake mean nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from secureml.enforcement.shim_control import SOURCES
from tests.support.fakegpu import SHIM_DIR, compiler

from .cuda_wheels import MAJORS, runtime

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check.sh"


def test_the_script_builds_the_shim_from_every_unit() -> None:
    assert sorted(p.name for p in SHIM_DIR.glob("*.c")) == sorted(SOURCES)


def test_the_dry_run_over_the_fake_driver(tmp_path: Path) -> None:
    if compiler() is None:
        pytest.skip("no C compiler")
    out = tmp_path / "gpu-check.json"
    env = {**os.environ, "PYTHON": sys.executable, "CC": compiler() or "cc"}
    result = subprocess.run(
        [str(SCRIPT), "--fake", "--dir", str(tmp_path / "build"), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["fake"] is True and report["seconds"] < 300
    assert report["device"]["name"] == "Fake GPU"
    nvml = report["nvml"]
    assert nvml["ok"] and nvml["xid_register_rc"] == 0 and nvml["xid"] == 79  # the fake's Xid
    assert nvml["retired_rc"] == 0 and nvml["remapped_rc"] == 0
    assert report["scrub"]["scrub_gb_per_s"] > 0 and report["scrub"]["memset_gb_per_s"] > 0
    overhead = report["overhead"]
    assert overhead["alloc_free_driver_ns"] > 0 and overhead["launch_shim_ns"] > 0
    quota = report["quota"]
    assert quota["held"] and quota["refused"] > 0 and quota["peak"] <= quota["quota"]
    assert quota["fill_after"] == quota["quota"]
    firewall = report["firewall"]
    assert firewall["all_refused"] and firewall["refused"] == 3
    assert all(rc != 800 for rc in firewall["driver"].values())  # the driver itself was reached
    # NVIDIA's runtimes (the test extra's wheels), dynamic and static: over the fake they stop in
    # their own initialisation (no cuGetExportTable), so nothing is allocated and nothing is held.
    expected = {
        f"cudart_probe_{linkage}{major}"
        for major in MAJORS
        if runtime(major) is not None
        for linkage in ("dynamic", "static")
    }
    assert set(report["cudart"]) == expected
    for name, run in report["cudart"].items():
        assert name.startswith("cudart_probe_")
        assert run["result"]["total"] == 0 and run["result"]["rc"] in (35, 36), (name, run)
