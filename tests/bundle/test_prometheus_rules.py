"""The rendered PrometheusRules, read by Prometheus itself: `promtool check rules` on every example
profile's rules, and `promtool test rules` with series that fire each alert at its threshold and
not below (Debian's `prometheus` package, which `make deps` installs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.bundle.common import BundleOptions
from secureml.bundle.monitoring import render
from tests.bundle.conftest import load, profile_ids

LABELS = 'namespace="{ns}",pod="p",container="main",gpu="0",UUID="GPU-1",Hostname="n1"'


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        message = "promtool is not installed (make deps: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return tool


def _groups(name: str) -> list[dict[str, Any]]:
    (rule,) = [m for m in render(load(name), BundleOptions()) if m["kind"] == "PrometheusRule"]
    return list(rule["spec"]["groups"])


def _promtool_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("name", profile_ids())
def test_prometheus_reads_every_profiles_rules(name: str, tmp_path: Path) -> None:
    profile = load(name)
    if not profile.spec.monitoring.alerts:
        pytest.skip(f"{name} renders no alerts (monitoring.alerts: false)")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _groups(name)}))
    result = _promtool_run("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _series(metric: str, values: str, namespace: str) -> dict[str, str]:
    return {"series": f"{metric}{{{LABELS.format(ns=namespace)}}}", "values": values}


def test_each_alert_fires_at_its_threshold_and_not_below(tmp_path: Path) -> None:
    name = "team-a"
    namespace = load(name).spec.namespace
    # The rules as rendered, their annotations left out: `check rules` above reads the templates,
    # and promtool compares an alert's annotations as expanded text, which says nothing of when
    # it fires. Expressions, `for` and labels are the renderer's.
    groups = _groups(name)
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    rules = {rule["alert"]: rule for group in groups for rule in group["rules"]}
    limit = int(rules["SecuremlGpuFramebufferOverTenantLimit"]["expr"].rsplit(">", 1)[1])

    def case(series: list[dict[str, str]], at: str, firing: dict[str, bool]) -> dict[str, Any]:
        """One test group: the series, and per alert whether it fires at `at`."""
        checks = []
        for alert, fire in firing.items():
            entry: dict[str, Any] = {"eval_time": at, "alertname": alert, "exp_alerts": []}
            if fire:
                pairs = (pair.split("=") for pair in LABELS.format(ns=namespace).split(","))
                labels = {key: value.strip('"') for key, value in pairs}
                entry["exp_alerts"] = [{"exp_labels": {**labels, **rules[alert]["labels"]}}]
            checks.append(entry)
        return {"interval": "1m", "input_series": series, "alert_rule_test": checks}

    xid = "DCGM_FI_DEV_XID_ERRORS"
    tests = [
        case(
            [_series(xid, "48x5", namespace)],
            "2m",
            {"SecuremlGpuXidMemory": True, "SecuremlGpuXidError": False},
        ),
        case(
            [_series(xid, "13x5", namespace)],
            "2m",
            {"SecuremlGpuXidApplication": True, "SecuremlGpuXidMemory": False},
        ),
        case(
            [_series(xid, "1x5", namespace)],
            "2m",
            {"SecuremlGpuXidError": True, "SecuremlGpuXidMemory": False},
        ),
        case([_series(xid, "0x5", namespace)], "2m", {"SecuremlGpuXidError": False}),
        # PCIe replays: more than 100 in a minute fires, exactly 100 does not
        case(
            [_series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "0+101x5", namespace)],
            "3m",
            {"SecuremlGpuPcieReplayErrors": True},
        ),
        case(
            [_series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "0+100x5", namespace)],
            "3m",
            {"SecuremlGpuPcieReplayErrors": False},
        ),
        # memory copy utilisation above 90% for 5 minutes fires; at 90%, or for 4 minutes, not
        case(
            [_series("DCGM_FI_DEV_MEM_COPY_UTIL", "91x10", namespace)],
            "6m",
            {"SecuremlGpuMemoryCopyUtilisationHigh": True},
        ),
        case(
            [_series("DCGM_FI_DEV_MEM_COPY_UTIL", "90x10", namespace)],
            "6m",
            {"SecuremlGpuMemoryCopyUtilisationHigh": False},
        ),
        case(
            [_series("DCGM_FI_DEV_MEM_COPY_UTIL", "91x3", namespace)],
            "4m",
            {"SecuremlGpuMemoryCopyUtilisationHigh": False},
        ),
        # framebuffer above the tenant's time-slice limit for a minute fires; at the limit, not
        case(
            [_series("DCGM_FI_DEV_FB_USED", f"{limit + 1}x5", namespace)],
            "2m",
            {"SecuremlGpuFramebufferOverTenantLimit": True},
        ),
        case(
            [_series("DCGM_FI_DEV_FB_USED", f"{limit}x5", namespace)],
            "2m",
            {"SecuremlGpuFramebufferOverTenantLimit": False},
        ),
    ]
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    result = _promtool_run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
