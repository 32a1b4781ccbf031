"""The PrometheusRule's Xid alerts: one per class of the Xid table, on dcgm-exporter's
DCGM_FI_DEV_XID_ERRORS (its value is the last Xid), and one for the codes outside the table."""

from __future__ import annotations

import re

from secureml.bundle.monitoring import alert_rules
from secureml.nvidia.xid import ROWS
from tests.bundle.conftest import load

CLASS_ALERTS = {
    "memory": ("SecuremlGpuXidMemory", "critical"),
    "device": ("SecuremlGpuXidDevice", "critical"),
    "nvlink": ("SecuremlGpuXidNvlink", "critical"),
    "application": ("SecuremlGpuXidApplication", "warning"),
}
METRIC = 'DCGM_FI_DEV_XID_ERRORS{namespace="team-a"}'


def _alerts() -> dict[str, dict]:
    return {rule["alert"]: rule for rule in alert_rules(load("team-a"))}


def _codes(expr: str) -> set[int]:
    return {int(code) for code in re.findall(re.escape(METRIC) + r" == (\d+)", expr)}


def test_one_alert_per_class_matching_exactly_its_xids() -> None:
    alerts = _alerts()
    for xid_class, (name, severity) in CLASS_ALERTS.items():
        rule = alerts[name]
        assert _codes(rule["expr"]) == {r.xid for r in ROWS if r.xid_class == xid_class}
        assert rule["labels"]["severity"] == severity and rule["for"] == "0m"
        assert "doctor logs" in rule["annotations"]["description"]
    assert "exit 79" in alerts["SecuremlGpuXidMemory"]["annotations"]["description"]


def test_the_catch_all_leaves_out_every_classified_xid() -> None:
    expr = _alerts()["SecuremlGpuXidError"]["expr"]
    assert f"{METRIC} > 0 unless (" in expr
    assert _codes(expr) == {r.xid for r in ROWS}


def test_the_seeds_thresholds_stay() -> None:
    alerts = _alerts()
    assert alerts["SecuremlGpuMemoryCopyUtilisationHigh"]["for"] == "5m"
    assert alerts["SecuremlGpuMemoryCopyUtilisationHigh"]["expr"].endswith("> 90")
    assert alerts["SecuremlGpuPcieReplayErrors"]["expr"].endswith("[1m])) > 100")


def test_each_expression_balances_its_parentheses() -> None:
    for rule in _alerts().values():
        depth = 0
        for char in rule["expr"]:
            depth += {"(": 1, ")": -1}.get(char, 0)
            assert depth >= 0, rule["expr"]
        assert depth == 0, rule["expr"]
