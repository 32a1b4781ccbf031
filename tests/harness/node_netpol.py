"""NetworkPolicy enforced on the test node: kube-network-policies v0.8.0 (started by
`tests/harness/node.py`'s `Node`, see docs/testing.md).

kube-network-policies (`tests/harness/build.sh network-policies`) runs as a pod on the node, as its
DaemonSet would (hostNetwork, privileged, image `agents`), watching pods, namespaces and
NetworkPolicies through the API server with its own service account. It keeps an nftables table
of its own (`inet secureml_netpol_<slot>`: one per node, since every node of this machine shares
its network namespace) whose `postrouting` chain sends the first packet of each new connection
from or to a pod that some NetworkPolicy selects to user space (NFQUEUE `100 + slot`), where the
policies decide; established traffic is accepted in the kernel. Pod-to-pod traffic on the node's
bridge goes through the same hook (`net.bridge.bridge-nf-call-iptables = 1`).

The "outside" of the node is a network namespace of the slot (`NodeNetwork`, 10.235.N.2 and
198.18.N.2 behind the veth `smloutN`) where netprobe echoes on ports 443 and 8080 of both: an
address inside team-a's egress allowlist (10.0.0.0/8) and one outside it, all on this machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .controlplane import HarnessError
from .node_identity import SYSTEM_NAMESPACE, apply, service_account, system_namespace, wait_for_pod

if TYPE_CHECKING:
    from .node import Node

OUTSIDE_PORTS = (443, 8080)


def table_name(slot: int) -> str:
    return f"secureml_netpol_{slot}"


def queue_number(slot: int) -> int:
    return 100 + slot


class NodeNetworkPolicies:
    """kube-network-policies for `node` and the echo servers of its slot's outside namespace."""

    def __init__(self, node: Node, bin_dir: Path) -> None:
        self.node = node
        self.bin_dir = bin_dir

    @property
    def table(self) -> str:
        return table_name(self.node.network.slot)

    @property
    def outside(self) -> tuple[str, str]:
        """The two addresses of the slot's outside namespace."""
        return self.node.network.outside_addresses

    def ruleset(self) -> str:
        """`nft list table inet secureml_netpol_<slot>`: what kube-network-policies installed."""
        done = subprocess.run(
            ["nft", "list", "table", "inet", self.table],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout if done.returncode == 0 else done.stderr

    def enforced_ips(self) -> set[str]:
        """The pod addresses whose new connections go to user space (the set `podips-v4`)."""
        done = subprocess.run(
            ["nft", "-j", "list", "set", "inet", self.table, "podips-v4"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return set()
        found: set[str] = set()
        for item in json.loads(done.stdout).get("nftables", []):
            for element in (item.get("set") or {}).get("elem", []):
                if isinstance(element, str):
                    found.add(element)
        return found

    def wait_enforced(self, *ips: str, timeout_s: float = 30.0) -> None:
        """Until every one of `ips` is in `podips-v4` (its pod is selected by some policy)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if set(ips) <= self.enforced_ips():
                return
            time.sleep(0.1)
        raise HarnessError(
            f"{sorted(set(ips) - self.enforced_ips())} not in {self.table}'s podips-v4 after "
            f"{timeout_s} s; the ruleset:\n{self.ruleset()}\nits log:\n{self.log()}"
        )

    def log(self, lines: int = 40) -> str:
        found = sorted(
            self.node.pod_logs.glob(
                f"{SYSTEM_NAMESPACE}_kube-network-policies_*/kube-network-policies/*.log"
            )
        )
        if not found:
            return "(no kube-network-policies log)"
        return "\n".join(found[-1].read_text(errors="replace").splitlines()[-lines:])

    def start(self, detach: bool, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        self._start_outside_servers(detach)
        system_namespace(self.node)
        service_account(
            self.node,
            "kube-network-policies",
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "namespaces", "nodes"],
                    "verbs": ["list", "watch", "get"],
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["list", "watch", "get"],
                },
            ],
        )
        subprocess.run(
            ["nft", "delete", "table", "inet", self.table], capture_output=True, check=False
        )
        cluster = self.node.cluster
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "kube-network-policies",
                "labels": {"app": "kube-network-policies"},
            },
            "spec": {
                "nodeName": self.node.name,
                "serviceAccountName": "kube-network-policies",
                "hostNetwork": True,
                "tolerations": [{"operator": "Exists"}],
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {
                        "name": "kube-network-policies",
                        "image": self.node.image("agents"),
                        "imagePullPolicy": "IfNotPresent",
                        "command": [
                            "/kube-network-policies",
                            f"--hostname-override={self.node.name}",
                            f"--nfqueue-id={queue_number(self.node.network.slot)}",
                            "--disable-nri",  # containerd 1.6 has no NRI
                            "--netfilter-bug-1766-fix=false",  # fixed in this 6.18 kernel
                            "--metrics-bind-address=127.0.0.1:0",
                            "--v=2",
                        ],
                        "env": [
                            # rest.InClusterConfig(): the API server's address, not a Service's
                            # (there is no kube-proxy)
                            {"name": "KUBERNETES_SERVICE_HOST", "value": cluster.address},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": str(cluster.port)},
                            {"name": "KUBE_NETWORK_POLICIES_TABLE", "value": self.table},
                        ],
                        "securityContext": {"privileged": True},
                    }
                ],
            },
        }
        apply(self.node, f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods", pod)
        wait_for_pod(self.node, SYSTEM_NAMESPACE, "kube-network-policies", deadline)
        while time.monotonic() < deadline:
            if "postrouting" in self.ruleset():
                return
            time.sleep(0.1)
        raise HarnessError(
            f"kube-network-policies made no table {self.table} in time; its log:\n{self.log()}"
        )

    def _start_outside_servers(self, detach: bool) -> None:
        """netprobe on 443 and 8080 of both outside addresses, inside the slot's namespace. The
        binary is copied into the node's folder first: `down` knows its processes by that path."""
        program = self.node.directory / "bin" / "netprobe"
        program.parent.mkdir(exist_ok=True)
        shutil.copy(self.bin_dir / "netprobe", program)
        self.node._spawn(
            "outside-echo",
            [
                "ip",
                "netns",
                "exec",
                self.node.network.outside_namespace,
                str(program),
                "serve",
                *(f"{address}:{port}" for address in self.outside for port in OUTSIDE_PORTS),
            ],
            detach,
            env={"NETPROBE_NAME": "outside"},
        )
