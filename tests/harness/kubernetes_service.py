"""The `kubernetes` Service reachable from the node's pods: one DNAT rule, kube-proxy's job for
that one Service.

In-cluster clients (Argo's `argoexec init` and `wait`, KFP's launcher) dial
`KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`, the ClusterIP the kubelet puts in every
container's environment (10.96.0.1:443; the API server's serving certificate names it). There is
no kube-proxy on the test node, so `ServiceRoute(network, cluster)` (a context manager) adds an
nftables table of its own, `secureml_svc_<slot>`, that rewrites what the slot's bridge sends to
that address and port to the API server's real address (the slot's, where it binds), and removes
it at exit. Nothing else of NodeNetwork changes.
"""

from __future__ import annotations

import subprocess
from types import TracebackType

from .controlplane import ControlPlane, HarnessError
from .node import NodeNetwork

SERVICE_PORT = 443


class ServiceRoute:
    def __init__(self, network: NodeNetwork, cluster: ControlPlane) -> None:
        self.network = network
        self.cluster = cluster
        self.table = f"secureml_svc_{network.slot}"
        self.cluster_ip = ""

    def __enter__(self) -> ServiceRoute:
        status, service = self.cluster.request(
            "GET", "/api/v1/namespaces/default/services/kubernetes"
        )
        if status != 200:
            raise HarnessError(f"no `kubernetes` Service: HTTP {status}: {service}")
        self.cluster_ip = service["spec"]["clusterIP"]
        self._delete()
        ruleset = f"""
table ip {self.table} {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "{self.network.bridge}" ip daddr {self.cluster_ip} tcp dport {SERVICE_PORT} dnat to {self.cluster.address}:{self.cluster.port}
    }}
}}
"""
        done = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
        if done.returncode != 0:
            raise HarnessError(f"nft refused the kubernetes Service's DNAT: {done.stderr.strip()}")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._delete()

    def _delete(self) -> None:
        subprocess.run(["nft", "delete", "table", "ip", self.table], capture_output=True)
