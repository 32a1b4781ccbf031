"""A cluster DNS for the test node: STAND-IN for CoreDNS (tests/harness/cluster_dns_server.py).

Trainer's torch plugin gives every node of a job the rendezvous address as a name,
`PET_MASTER_ADDR=<job>-node-0-0.<job>`, resolved through the cluster DNS; the test node has none
(CoreDNS is not built here). `ClusterDNS(cluster, network, image)` (a context manager) runs the
stand-in as a platform runs its DNS: a pod `kube-dns` in `kube-system` labelled
`k8s-app: kube-dns` (what the tenant's `secureml-allow-dns` NetworkPolicy lets pods reach, UDP
53), with a read-only service account, behind the Service `kube-dns` at `CLUSTER_DNS_IP`, the
address the node's kubelet writes into every pod's resolv.conf (`Node(cluster_dns=...)`). There is
no kube-proxy: one nftables DNAT rule of its own (`secureml_dns_<slot>`) sends what the slot's
bridge sends to that address's UDP port 53 to the pod, as kube-proxy would. `image` must hold
python3 (the session's step image does).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from .controlplane import ControlPlane, HarnessError
from .node import NodeNetwork
from .service import Service

CLUSTER_DNS_IP = "10.96.0.10"  # kubeadm's choice in the 10.96.0.0/12 range; ours is 10.96.0.0/16
NAMESPACE = "kube-system"
NAME = "kube-dns"
SERVER = Path(__file__).resolve().parent / "cluster_dns_server.py"


def _objects(image: str) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) of everything the DNS needs, in creation order."""
    labels = {"k8s-app": NAME}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    return [
        (
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME}},
        ),
        (
            f"{rbac}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "secureml-test:kube-dns"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list"]}
                ],
            },
        ),
        (
            f"{rbac}/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "secureml-test:kube-dns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "secureml-test:kube-dns",
                },
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
            },
        ),
        (
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": NAME},
                "data": {"server.py": SERVER.read_text()},
            },
        ),
        (
            f"/api/v1/namespaces/{NAMESPACE}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": NAME, "labels": labels},
                "spec": {
                    "clusterIP": CLUSTER_DNS_IP,
                    "selector": labels,
                    "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}],
                },
            },
        ),
        (
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": NAME, "labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "containers": [
                        {
                            "name": "dns",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["python3", "/dns/server.py"],
                            "ports": [{"containerPort": 53, "protocol": "UDP"}],
                            "securityContext": {
                                "runAsUser": 0,  # port 53; CoreDNS adds NET_BIND_SERVICE likewise
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                "readOnlyRootFilesystem": True,
                            },
                            "volumeMounts": [{"name": "server", "mountPath": "/dns"}],
                        }
                    ],
                    "volumes": [{"name": "server", "configMap": {"name": NAME}}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        ),
    ]


class ClusterDNS(Service):
    def __init__(self, cluster: ControlPlane, network: NodeNetwork, image: str) -> None:
        self.cluster = cluster
        self.network = network
        self.image = image
        self.table = f"secureml_dns_{network.slot}"
        self.pod_ip = ""

    def start(self, timeout_s: float = 120.0) -> None:
        for path, body in _objects(self.image):
            status, answer = self.cluster.request("POST", path, body)
            if status not in (201, 409):
                raise HarnessError(f"creating {body['kind']} {NAME}: HTTP {status}: {answer}")
        deadline = time.monotonic() + timeout_s
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            _, pod = self.cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{NAME}")
            status = (pod or {}).get("status", {})
            if status.get("phase") == "Running" and status.get("podIP"):
                self.pod_ip = status["podIP"]
                break
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        if not self.pod_ip:
            raise HarnessError(f"the cluster DNS pod did not run: {(pod or {}).get('status')}")
        ruleset = f"""
table ip {self.table} {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "{self.network.bridge}" ip daddr {CLUSTER_DNS_IP} udp dport 53 dnat to {self.pod_ip}:53
    }}
}}
"""
        self._delete_table()
        done = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
        if done.returncode != 0:
            raise HarnessError(f"nft refused the cluster DNS's DNAT: {done.stderr.strip()}")

    def stop(self) -> None:
        self._delete_table()
        for path, body in reversed(_objects(self.image)):
            self.cluster.request("DELETE", f"{path}/{body['metadata']['name']}")

    def _delete_table(self) -> None:
        subprocess.run(["nft", "delete", "table", "ip", self.table], capture_output=True)
