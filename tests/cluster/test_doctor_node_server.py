"""`secureml doctor node --node-name`: the node's labels come from the real API server, and decide
which profiles' pools hold the node (the GPUs are the fake NVML's)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from tests.harness.controlplane import ControlPlane
from tests.support.doctor_host import DRIVER, H100, by_name, host_root
from tests.support.fakegpu import FakeConfidential, FakeDevice

REPO = Path(__file__).resolve().parents[2]


def _doctor(gpu, root: Path, kubeconfig: Path, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "secureml", "doctor", "node", "--root", str(root),
            "--profiles", str(REPO / "profiles"), "--node-name", node,
            "--kubeconfig", str(kubeconfig), "--format", "json",
        ],
        env=gpu.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_node_labels_read_from_the_api_server(
    k8s_cluster: ControlPlane, make_fake_gpu, tmp_path: Path
) -> None:
    node = f"gpu-node-{uuid.uuid4().hex[:6]}"
    labels = {"secureml.dev/pool": "restricted-h100", "nvidia.com/cc.ready.state": "true"}
    status, answer = k8s_cluster.request(
        "POST",
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}},
    )
    assert status == 201, answer
    try:
        gpu = make_fake_gpu(
            devices=[FakeDevice(name=H100)],
            driver_version=DRIVER,
            confidential=FakeConfidential(mode="on", ready=True, capable=True, cpu=3),
        )
        result = _doctor(gpu, host_root(tmp_path), k8s_cluster.kubeconfig, node)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["nodeLabels"] == labels
        pool = by_name(report)["profiles.pool"]
        assert pool["seen"] == "team-restricted by the node's labels"
        missing = _doctor(
            gpu, host_root(tmp_path / "other"), k8s_cluster.kubeconfig, "no-such-node"
        )
        assert missing.returncode == 2 and "404" in missing.stderr, missing.stderr
    finally:
        k8s_cluster.request("DELETE", f"/api/v1/nodes/{node}")
