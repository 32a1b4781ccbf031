"""Pods run for real on the test node (tests/harness/node.py): scheduled by kube-scheduler, started by
the kubelet through containerd and runc from an image pulled by digest from the node's registry, and
each control checked from inside the running container, not read back from the pod spec."""

from __future__ import annotations

import datetime
import json
import re
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import node_pods as pods
from tests.support.node_pods import NodeCluster

pytestmark = [pytest.mark.node, pytest.mark.cluster]


def _status_fields(text: str) -> dict[str, str]:
    """`Key:\tvalue` lines of /proc/<pid>/status."""
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value:
            fields[key.strip()] = value.strip()
    return fields


@pytest.mark.parametrize("pull", ["IfNotPresent", "Always"])
def test_a_pod_runs_to_succeeded_through_the_scheduler(k8s_node: NodeCluster, pull: str) -> None:
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    image = node.image("busybox")
    assert "@sha256:" in image
    started = time.monotonic()
    done = pods.run(
        cluster, namespace, pods.pod("hello", image, "echo hello from $(hostname)", pull=pull)
    )
    seconds = time.monotonic() - started
    print(f"\npod to Succeeded in {seconds:.1f} s (imagePullPolicy {pull})")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["spec"]["nodeName"] == node.name  # bound by kube-scheduler: the pod named no node
    assert pods.terminated(done)["exitCode"] == 0
    status = done["status"]["containerStatuses"][0]
    # containerd resolved the digest the pod named, from the node's registry
    assert status["imageID"].endswith(image.split("@", 1)[1]), status
    assert pods.log(cluster, namespace, "hello") == "hello from hello\n"


def test_a_pod_without_the_pools_toleration_is_not_scheduled(k8s_node: NodeCluster) -> None:
    cluster = k8s_node.cluster
    namespace = k8s_node.namespace()
    manifest = pods.pod("untolerated", k8s_node.node.image("busybox"), "true")
    del manifest["spec"]["tolerations"]
    pods.create(cluster, namespace, manifest)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, current = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/untolerated")
        scheduled = [
            c for c in current["status"].get("conditions", []) if c["type"] == "PodScheduled"
        ]
        if scheduled and scheduled[0]["reason"] == "Unschedulable":
            assert "untolerated taint" in scheduled[0]["message"], scheduled
            assert not current["spec"].get("nodeName")
            return
        time.sleep(0.1)
    raise AssertionError(f"the scheduler said nothing of the taint: {current['status']}")


def test_a_hardened_pod_really_runs_hardened(k8s_node: NodeCluster) -> None:
    """uid/gid 65534, no capability in any set, no_new_privs, a seccomp filter, a read-only root:
    read from /proc/self/status of a process in the container, and a write to / refused."""
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    script = (
        "cat /proc/self/status; echo ---; "
        "touch /written 2>&1 || echo ROOT-REFUSED; "
        "touch /tmp/written 2>&1 || echo TMP-REFUSED"
    )
    done = pods.run(cluster, namespace, pods.pod("hardened", node.image("busybox"), script))
    assert done["status"]["phase"] == "Succeeded", done["status"]
    text = pods.log(cluster, namespace, "hardened")
    status_text, _, writes = text.partition("---\n")
    fields = _status_fields(status_text)
    assert fields["Uid"].split() == ["65534"] * 4, fields["Uid"]
    assert fields["Gid"].split() == ["65534"] * 4, fields["Gid"]
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[capabilities], 16) == 0, (capabilities, fields[capabilities])
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"  # SECCOMP_MODE_FILTER: containerd's RuntimeDefault profile
    assert "Read-only file system" in writes and "ROOT-REFUSED" in writes, writes
    assert "TMP-REFUSED" in writes, writes


def test_a_memory_limit_really_oom_kills(k8s_node: NodeCluster) -> None:
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    limits = {"memory": "32Mi", "cpu": "500m"}
    manifest = pods.pod(
        "hog",
        node.image("busybox"),
        "echo start; exec dd if=/dev/zero of=/dev/null bs=128M count=1",
        resources={"limits": limits, "requests": limits},
    )
    done = pods.run(cluster, namespace, manifest)
    assert done["status"]["phase"] == "Failed", done["status"]
    state = pods.terminated(done)
    assert state["reason"] == "OOMKilled" and state["exitCode"] == 137, state
    assert pods.log(cluster, namespace, "hog").startswith("start\n")


def test_a_pod_reaches_the_api_server_with_its_own_token(k8s_node: NodeCluster) -> None:
    """From the pod's network namespace, over the node's bridge, to the API server's address, as an
    in-cluster client: apiprobe checks the server's certificate against the CA the pod was given
    (kube-root-ca.crt, published by kube-controller-manager) and creates a SelfSubjectReview with
    the pod's projected service-account token, which names the pod's account, the pod and node."""
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    script = f"apiprobe && echo && echo --- && cat {secrets}/ca.crt"
    manifest = pods.pod("caller", node.image("busybox"), script, env={"API_SERVER": cluster.url})
    done = pods.run(cluster, namespace, manifest)
    text = pods.log(cluster, namespace, "caller")
    assert done["status"]["phase"] == "Succeeded", (done["status"], text)
    answer, _, ca = text.partition("---\n")
    user = json.loads(answer)["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:default", user
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["caller"], user
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node.name], user
    assert ca.strip() == (cluster.directory / "pki" / "ca.crt").read_text().strip()
    pod_ip = done["status"]["podIP"]
    assert re.fullmatch(rf"10\.234\.{node.network.slot}\.\d+", pod_ip), pod_ip


def test_the_pods_client_refuses_a_server_its_ca_did_not_sign(k8s_node: NodeCluster) -> None:
    """The control for the test above: the same probe, given another CA (a ConfigMap), refuses the
    server: the certificate is checked, not only the token accepted."""
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "another-ca")])
    now = datetime.datetime.now(datetime.UTC)
    other = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "another-ca"},
        "data": {"ca.crt": other.public_bytes(serialization.Encoding.PEM).decode()},
    }
    status, answer = cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", config_map
    )
    assert status == 201, answer
    manifest = pods.pod(
        "distrustful",
        node.image("busybox"),
        "apiprobe",
        env={"API_SERVER": cluster.url, "CA_FILE": "/another-ca/ca.crt"},
    )
    manifest["spec"]["volumes"] = [{"name": "ca", "configMap": {"name": "another-ca"}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "ca", "mountPath": "/another-ca", "readOnly": True}
    ]
    done = pods.run(cluster, namespace, manifest)
    text = pods.log(cluster, namespace, "distrustful")
    assert done["status"]["phase"] == "Failed", (done["status"], text)
    assert "certificate signed by unknown authority" in text, text
