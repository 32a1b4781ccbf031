"""Issue 34, point 9: `profile explain` summarises a bundle; `profile diff` speaks in rules and
fields."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.bundle import BundleOptions
from secureml.bundle.diff import bundle_changes
from secureml.bundle.explain import explain
from secureml.cli import app
from secureml.profile.model import TenantProfile
from secureml.rules import rules_for_profile
from tests.bundle.conftest import ROOT, load

runner = CliRunner()


def _pool(data: dict, prefix: str) -> dict:
    [pool] = [pool for pool in data["pools"] if pool["pool"].startswith(prefix)]
    return pool


@pytest.mark.parametrize("tenant", ["team-a", "team-conf", "team-dra", "team-restricted"])
def test_explain_lists_every_rule_of_the_bundle_once(tenant: str) -> None:
    profile = load(tenant)
    data = explain(profile)
    assert [rule["id"] for rule in data["rules"]] == [r.id for r in rules_for_profile(profile)]
    ids = {rule["id"] for rule in data["rules"]}
    for pool in data["pools"]:
        assert set(pool["rules"]) <= ids, pool  # a pool names only rules the bundle has


def test_explain_says_what_each_pool_allows_and_refuses() -> None:
    team_a = explain(load("team-a"))
    timeslice = _pool(team_a, "time-sliced")
    assert timeslice["allowed"] and "secureml.shimLimits" in timeslice["rules"]
    assert "at most 16Gi of GPU memory and 50% of its compute" in " ".join(timeslice["terms"])
    assert "nvidia.com/gpu.shared: namespace quota 8" in timeslice["terms"]
    assert _pool(team_a, "whole GPUs")["terms"][0] == "1 to 2 whole GPU(s) a step"
    conf = explain(load("team-conf"))
    assert conf["isolation"] == {"weakest": "mig", "allowed": ["mig", "dedicated"]}
    refused = _pool(conf, "time-sliced")
    assert not refused["allowed"] and refused["refused"] == "spec.gpu.timeSlice is not set"
    assert any("platform runtime image" in item for item in conf["required"])


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_explain_command(fmt: str) -> None:
    result = runner.invoke(
        app, ["profile", "explain", str(ROOT / "profiles" / "team-a.yaml"), "--format", fmt]
    )
    assert result.exit_code == 0, result.output
    if fmt == "markdown":
        assert result.output.startswith("# Tenant `team-a`: what its bundle enforces\n")
        assert "| `secureml.shimLimits` |" in result.output
        assert "## Refused at admission: secureml step pods" in result.output
    else:
        assert result.output.startswith("tenant team-a (namespace team-a), tier internal:")
        assert "  secureml.imageDigest: must pin its image by digest" in result.output
    assert runner.invoke(app, ["profile", "explain", str(ROOT / "README.md")]).exit_code == 2


def _changed(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((ROOT / "profiles" / "team-a.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    path = tmp_path / "new.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_diff_names_the_rule_and_the_field(tmp_path: Path) -> None:
    new = _changed(tmp_path, **{"spec.gpu.timeSlice.maxMemory": "8Gi"})
    changes = bundle_changes(load("team-a"), load_path(new), BundleOptions())
    assert changes["fields"] == [
        {"field": "spec.gpu.timeSlice.maxMemory", "old": "17179869184", "new": "8589934592"}
    ]
    by_rule = {change["rule"]: change for change in changes["rules"]}
    assert set(by_rule) == {"secureml.shimLimits", "secureml.gpuRequest"}
    assert by_rule["secureml.shimLimits"]["change"] == "allows"
    assert "memory <= 17179869184 bytes" in by_rule["secureml.shimLimits"]["old"]
    assert "memory <= 8589934592 bytes" in by_rule["secureml.shimLimits"]["new"]
    result = runner.invoke(
        app, ["profile", "diff", str(ROOT / "profiles" / "team-a.yaml"), str(new)]
    )
    assert result.exit_code == 1
    assert "  spec.gpu.timeSlice.maxMemory: 17179869184 -> 8589934592\n" in result.output
    assert "  secureml.shimLimits: now allows something else\n" in result.output
    assert "---" not in result.output  # words, not the unified diff
    unified = runner.invoke(
        app, ["profile", "diff", str(ROOT / "profiles" / "team-a.yaml"), str(new), "--unified"]
    )
    assert unified.exit_code == 1 and unified.output.startswith("--- a/team-a/")


def test_diff_lists_added_and_removed_rules_and_objects(tmp_path: Path) -> None:
    quota = {"nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-2g.20gb": 4, "nvidia.com/gpu.shared": 8}
    new = _changed(
        tmp_path,
        **{"spec.gpu.wholeGpu": None, "spec.gpu.quota": quota, "spec.monitoring.alerts": False},
    )
    changes = bundle_changes(load("team-a"), load_path(new), BundleOptions())
    removed = {c["rule"] for c in changes["rules"] if c["change"] == "removed"}
    assert {"secureml.wholeGpuCount", "secureml.dedicatedPool"} <= removed
    objects = {entry["object"]: entry["change"] for entry in changes["objects"]}
    assert objects["PrometheusRule/team-a/secureml-gpu-alerts"] == "removed"


def load_path(path: Path) -> TenantProfile:
    from secureml.profile.model import load_profile

    return load_profile(path)
