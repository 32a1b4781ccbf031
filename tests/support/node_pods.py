"""Pods on the test node: build one, run it to its end through the scheduler and the kubelet, read
its log back through the API server (which asks the kubelet, as `kubectl logs` does)."""

from __future__ import annotations

import http.client
import ssl
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.harness.controlplane import ControlPlane
from tests.harness.node import TOLERATIONS, Node

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
HARDENED: dict[str, Any] = {  # what PodSecurity `restricted` asks for, and a read-only root
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "runAsGroup": 65534,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
    "readOnlyRootFilesystem": True,
}


@dataclass(frozen=True)
class NodeCluster:
    """The `k8s_node` fixture: a control plane and its node."""

    cluster: ControlPlane
    node: Node

    def namespace(self, prefix: str = "node-test") -> str:
        """A new namespace that enforces PodSecurity `restricted`."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.cluster.create_namespace(name, RESTRICTED)
        return name


def pod(
    name: str,
    image: str,
    script: str,
    *,
    pull: str = "IfNotPresent",
    resources: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A hardened pod running `sh -c script` once, for the node's pool (selector, toleration)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": pull,
        "command": ["/bin/sh", "-c", script],
        "securityContext": HARDENED,
    }
    if resources:
        container["resources"] = resources
    if env:
        container["env"] = [{"name": key, "value": value} for key, value in env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"secureml.dev/pool": "dedicated"},
            "tolerations": TOLERATIONS,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def create(cluster: ControlPlane, namespace: str, manifest: dict[str, Any]) -> None:
    status, answer = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", manifest)
    assert status == 201, f"creating pod {manifest['metadata']['name']}: HTTP {status}: {answer}"


def wait_for_end(
    cluster: ControlPlane, namespace: str, name: str, timeout_s: float = 120.0
) -> dict[str, Any]:
    """The pod once its phase is Succeeded or Failed."""
    deadline = time.monotonic() + timeout_s
    current: Any = None
    while time.monotonic() < deadline:
        status, current = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        assert status == 200, f"reading pod {name}: HTTP {status}: {current}"
        if current["status"].get("phase") in ("Succeeded", "Failed"):
            return dict(current)
        time.sleep(0.1)
    raise AssertionError(f"pod {namespace}/{name} did not end in {timeout_s} s: {current}")


def run(
    cluster: ControlPlane, namespace: str, manifest: dict[str, Any], timeout_s: float = 120.0
) -> dict[str, Any]:
    create(cluster, namespace, manifest)
    return wait_for_end(cluster, namespace, manifest["metadata"]["name"], timeout_s)


def log(cluster: ControlPlane, namespace: str, name: str, container: str = "main") -> str:
    """The container's log as text, through the API server and the kubelet's /containerLogs."""
    context = ssl.create_default_context(cafile=str(cluster.directory / "pki" / "ca.crt"))
    pki = cluster.directory / "pki"
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    connection = http.client.HTTPSConnection(
        cluster.address, cluster.port, context=context, timeout=30
    )
    try:
        connection.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log?container={container}"
        )
        response = connection.getresponse()
        text = response.read().decode(errors="replace")
    finally:
        connection.close()
    assert response.status == 200, f"log of {namespace}/{name}: HTTP {response.status}: {text}"
    return text


def terminated(pod: dict[str, Any]) -> dict[str, Any]:
    """The `terminated` state of the pod's only container."""
    statuses = pod["status"].get("containerStatuses") or []
    assert len(statuses) == 1, pod["status"]
    state = statuses[0]["state"]
    assert "terminated" in state, state
    return dict(state["terminated"])
