"""NetworkPolicy enforced for real on the test node (tests/harness/node_netpol.py:
kube-network-policies v0.8.0 over nftables): pods send real TCP traffic (netprobe, in the node's
busybox image) to other pods and to the slot's outside namespace, and each verdict is read from
the client's own log. The NetworkPolicies are team-a's, as `secureml profile render
profiles/team-a.yaml` writes them (default deny, egress to 10.0.0.0/8 on 443, to KFP's services in
`kubeflow`, DNS), and hand-written ones for the generic cases.

A client pod waits 2 s before it connects: kube-network-policies learns a new pod's address from
the API server, and a connection it sees before that is judged as one from an unknown address
(upstream's NRI integration closes that gap; containerd 1.6 has no NRI)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.node_identity import wait_for_pod
from tests.harness.node_netpol import NodeNetworkPolicies, queue_number
from tests.node import bundle
from tests.support import node_pods as pods
from tests.support.node_pods import RESTRICTED, NodeCluster

pytestmark = [pytest.mark.node, pytest.mark.cluster]

NETPOL = "/apis/networking.k8s.io/v1/namespaces"
TENANT_LABEL = {"secureml.dev/tenant": "team-a"}


def enforcer(k8s_node: NodeCluster) -> NodeNetworkPolicies:
    assert k8s_node.node.network_policies is not None, "the node runs without NetworkPolicy"
    return k8s_node.node.network_policies


def server(
    k8s_node: NodeCluster, namespace: str, name: str, labels: dict[str, str], ports: tuple[int, ...]
) -> str:
    """A netprobe echo server pod listening on `ports`; its address once it is running."""
    manifest = pods.pod(
        name,
        k8s_node.node.image("busybox"),
        "exec netprobe serve " + " ".join(f":{port}" for port in ports),
        env={"NETPROBE_NAME": name},
    )
    manifest["metadata"]["labels"] = labels
    pods.create(k8s_node.cluster, namespace, manifest)
    running = wait_for_pod(k8s_node.node, namespace, name, time.monotonic() + 60)
    return str(running["status"]["podIP"])


def verdicts(
    k8s_node: NodeCluster,
    namespace: str,
    targets: list[str],
    labels: dict[str, str] | None = None,
) -> dict[str, str]:
    """Run a client pod that connects to every target (`host:port`): target -> `open` or
    `closed` (and the reply or error after it)."""
    name = f"client-{uuid.uuid4().hex[:6]}"
    manifest = pods.pod(
        name,
        k8s_node.node.image("busybox"),
        "sleep 2; exec netprobe connect " + " ".join(targets),
        env={"NETPROBE_TIMEOUT": "2s"},
    )
    if labels:
        manifest["metadata"]["labels"] = labels
    done = pods.run(k8s_node.cluster, namespace, manifest)
    text = pods.log(k8s_node.cluster, namespace, name)
    assert done["status"]["phase"] == "Succeeded", (done["status"], text)
    found = {}
    for line in text.splitlines():
        target, _, verdict = line.partition(" ")
        found[target] = verdict
    assert set(found) == set(targets), text
    return found


def is_open(verdict: str) -> bool:
    return verdict.startswith("open ")


def create_policy(k8s_node: NodeCluster, namespace: str, policy: dict[str, Any]) -> None:
    status, answer = k8s_node.cluster.request(
        "POST", f"{NETPOL}/{namespace}/networkpolicies", policy
    )
    assert status == 201, answer


@pytest.fixture(scope="module")
def team_a(
    k8s_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """team-a's rendered Namespace and NetworkPolicies applied; a team-a server pod, a minio-like
    pod in `kubeflow` (what team-a's allow-kfp policy names) and the outside addresses."""
    cluster = k8s_node.cluster
    objects = bundle.render("profiles/team-a.yaml", tmp_path_factory.mktemp("render"))
    applied = bundle.apply_kinds(cluster, objects, ("Namespace", "NetworkPolicy"))
    names = sorted(m["metadata"]["name"] for m in applied if m["kind"] == "NetworkPolicy")
    assert names == [
        "secureml-allow-dns",
        "secureml-allow-egress",
        "secureml-allow-kfp",
        "secureml-default-deny",
    ], names
    status, _ = cluster.request("GET", "/api/v1/namespaces/kubeflow")
    if status == 404:
        cluster.create_namespace("kubeflow", RESTRICTED)
    suffix = uuid.uuid4().hex[:6]
    minio = server(k8s_node, "kubeflow", f"minio-{suffix}", {"app": "minio"}, (9000, 9001))
    team_server = server(
        k8s_node, "team-a", f"server-{suffix}", {**TENANT_LABEL, "app": "server"}, (8080, 443)
    )
    enforcer(k8s_node).wait_enforced(team_server)
    inside, beyond = enforcer(k8s_node).outside
    yield {"minio": minio, "server": team_server, "inside": inside, "beyond": beyond}


def test_kube_network_policies_runs_its_nftables_table(
    k8s_node: NodeCluster, team_a: dict[str, str]
) -> None:
    ruleset = enforcer(k8s_node).ruleset()
    assert "hook postrouting" in ruleset, ruleset
    # NFQUEUE through nft_compat (this kernel has no nft_queue), listed as nft's own verdict
    assert f"queue num {queue_number(k8s_node.node.network.slot)}" in ruleset, ruleset
    assert team_a["server"] in enforcer(k8s_node).enforced_ips()


def test_team_a_egress_opens_exactly_what_the_profile_says(
    k8s_node: NodeCluster, team_a: dict[str, str]
) -> None:
    """From a team-a pod: the allowlist (10.0.0.0/8 on 443) and KFP's minio on 9000 are open; the
    same addresses on other ports, an address outside 10.0.0.0/8 and another team-a pod are not."""
    inside, beyond, minio = team_a["inside"], team_a["beyond"], team_a["minio"]
    targets = {
        f"{inside}:443": True,  # secureml-allow-egress: 10.0.0.0/8, TCP 443
        f"{inside}:8080": False,  # the same address, a port the profile does not list
        f"{beyond}:443": False,  # outside the allowlist's CIDR
        f"{minio}:9000": True,  # secureml-allow-kfp: kubeflow's app=minio on 9000
        f"{minio}:9001": False,  # the same pod, another port
        f"{team_a['server']}:8080": False,  # a team-a pod: egress and ingress denied
    }
    found = verdicts(k8s_node, "team-a", list(targets), TENANT_LABEL)
    assert {t: is_open(v) for t, v in found.items()} == targets, found


def test_team_a_default_deny_refuses_ingress_from_its_own_namespace_and_others(
    k8s_node: NodeCluster, team_a: dict[str, str]
) -> None:
    """team-a's server refuses a pod of another namespace and a pod of team-a. The other
    namespace has no policy of its own: its connections to kubeflow's minio on 9001 and to the
    outside address beyond team-a's allowlist go through (the controls: what team-a's pods are
    refused there, the policy refuses, not the node's network)."""
    other = k8s_node.namespace("np-other")
    server_target = f"{team_a['server']}:8080"
    controls = [f"{team_a['minio']}:9001", f"{team_a['beyond']}:443", f"{team_a['inside']}:8080"]
    found = verdicts(k8s_node, other, [server_target, *controls])
    assert not is_open(found[server_target]), found
    assert all(is_open(found[control]) for control in controls), found
    found = verdicts(k8s_node, "team-a", [f"{team_a['server']}:443"], {"app": "peer"})
    assert not is_open(found[f"{team_a['server']}:443"]), found


def test_an_ingress_allow_rule_opens_exactly_what_it_says(k8s_node: NodeCluster) -> None:
    """Hand-written: no policy, everything open; default deny, nothing; then an allow from pods
    labelled role=client of the same namespace on TCP 8080: that port for those pods only."""
    namespace = k8s_node.namespace("np-generic")
    name = f"server-{uuid.uuid4().hex[:6]}"
    address = server(k8s_node, namespace, name, {"app": "server"}, (8080, 8081))
    on_8080, on_8081 = f"{address}:8080", f"{address}:8081"
    found = verdicts(k8s_node, namespace, [on_8080, on_8081], {"role": "client"})
    assert is_open(found[on_8080]) and is_open(found[on_8081]), found  # no policy yet
    assert found[on_8080].startswith(f"open {name}@") and found[on_8080].endswith(": ping"), found

    create_policy(
        k8s_node,
        namespace,
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny-ingress"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        },
    )
    enforcer(k8s_node).wait_enforced(address)
    found = verdicts(k8s_node, namespace, [on_8080, on_8081], {"role": "client"})
    assert not is_open(found[on_8080]) and not is_open(found[on_8081]), found

    create_policy(
        k8s_node,
        namespace,
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "allow-clients-8080"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "server"}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                        "ports": [{"protocol": "TCP", "port": 8080}],
                    }
                ],
            },
        },
    )
    found = verdicts(k8s_node, namespace, [on_8080, on_8081], {"role": "client"})
    assert is_open(found[on_8080]), found
    assert not is_open(found[on_8081]), found
    found = verdicts(k8s_node, namespace, [on_8080], {"role": "other"})
    assert not is_open(found[on_8080]), found
    other = k8s_node.namespace("np-generic-other")  # role=client, but another namespace
    found = verdicts(k8s_node, other, [on_8080], {"role": "client"})
    assert not is_open(found[on_8080]), found
