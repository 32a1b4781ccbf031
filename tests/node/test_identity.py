"""SPIFFE identity for real on the test node (tests/harness/node_identity.py): the ClusterSPIFFEID
that `secureml profile render profiles/team-a.yaml` writes, turned into entries by
spire-controller-manager; SPIRE's agent, attested by `k8s_psat`, attesting each pod with the `k8s`
workload attestor against the kubelet; the Workload API socket mounted into the pod by the SPIFFE
CSI driver (`csi.spiffe.io`) where the profile says (`/spiffe-workload-api`). svidprobe, in the
pod, fetches its X.509 SVID as a step's launcher would."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.node_identity import NodeIdentity
from tests.node import bundle
from tests.support import node_pods as pods
from tests.support.node_pods import RESTRICTED, NodeCluster

pytestmark = [pytest.mark.node, pytest.mark.cluster]

TENANT = "team-a"
SOCKET = "unix:///spiffe-workload-api/spire-agent.sock"  # profiles/team-a.yaml's socketPath


@pytest.fixture(scope="module")
def team_a(k8s_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """team-a's Namespace and ClusterSPIFFEID, as rendered, applied to the node's cluster."""
    objects = bundle.render("profiles/team-a.yaml", tmp_path_factory.mktemp("render"))
    applied = bundle.apply_kinds(k8s_node.cluster, objects, ("Namespace", "ClusterSPIFFEID"))
    assert [m["kind"] for m in applied] == ["Namespace", "ClusterSPIFFEID"], applied
    yield TENANT


def identity(k8s_node: NodeCluster) -> NodeIdentity:
    assert k8s_node.node.identity is not None, "the node runs without SPIRE"
    return k8s_node.node.identity


def step_pod(
    image: str, labels: dict[str, str], *, timeout: str = "30s", name: str | None = None
) -> dict[str, Any]:
    """A hardened pod with the step's labels and the CSI volume, running svidprobe once."""
    manifest = pods.pod(
        name or f"step-{uuid.uuid4().hex[:6]}",
        image,
        f"exec svidprobe {SOCKET}",
        env={"SVIDPROBE_TIMEOUT": timeout},
    )
    manifest["metadata"]["labels"] = labels
    manifest["spec"]["volumes"] = [
        {"name": "spiffe-workload-api", "csi": {"driver": "csi.spiffe.io", "readOnly": True}}
    ]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "spiffe-workload-api", "mountPath": "/spiffe-workload-api", "readOnly": True}
    ]
    return manifest


def labels(pipeline: str, step: str, tenant: str = TENANT) -> dict[str, str]:
    return {
        "secureml.dev/tenant": tenant,
        "secureml.dev/pipeline": pipeline,
        "secureml.dev/step": step,
    }


def expected_id(pipeline: str, step: str) -> str:  # the template the rendered CSID carries
    return f"spiffe://acme.example/ns/{TENANT}/pipeline/{pipeline}/step/{step}"


def run_probe(
    k8s_node: NodeCluster, namespace: str, manifest: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    done = pods.run(k8s_node.cluster, namespace, manifest)
    return done, pods.log(k8s_node.cluster, namespace, manifest["metadata"]["name"])


def test_a_step_pod_gets_exactly_its_spiffe_id(k8s_node: NodeCluster, team_a: str) -> None:
    node = k8s_node.node
    pipeline = f"p{uuid.uuid4().hex[:6]}"
    manifest = step_pod(node.image("busybox"), labels(pipeline, "train"))
    started = time.monotonic()
    done, text = run_probe(k8s_node, team_a, manifest)
    seconds = time.monotonic() - started
    assert done["status"]["phase"] == "Succeeded", (
        done["status"],
        text,
        identity(k8s_node).agent_log(),
    )
    answer = json.loads(text)
    print(
        f"\npod created to SVID in {seconds:.1f} s; svidprobe's fetch {answer['fetch_ms']} ms "
        f"({answer['attempts']} attempts: the entry reaches the agent after the pod starts)"
    )
    assert answer["spiffe_id"] == expected_id(pipeline, "train"), answer
    # the entry spire-controller-manager made: parent the node's k8s_psat agent, selector the pod
    wanted = expected_id(pipeline, "train")
    (entry,) = [
        e
        for e in identity(k8s_node).entries()
        if f"spiffe://{e['spiffe_id']['trust_domain']}{e['spiffe_id']['path']}" == wanted
    ]
    parent = f"spiffe://{entry['parent_id']['trust_domain']}{entry['parent_id']['path']}"
    assert parent == identity(k8s_node).agent_id(), entry
    selectors = {f"{s['type']}:{s['value']}" for s in entry["selectors"]}
    assert selectors == {f"k8s:pod-uid:{done['metadata']['uid']}"}, entry


def test_another_step_of_the_same_pipeline_gets_its_own_id(
    k8s_node: NodeCluster, team_a: str
) -> None:
    pipeline = f"p{uuid.uuid4().hex[:6]}"
    image = k8s_node.node.image("busybox")
    done, text = run_probe(k8s_node, team_a, step_pod(image, labels(pipeline, "evaluate")))
    assert done["status"]["phase"] == "Succeeded", (done["status"], text)
    spiffe_id = json.loads(text)["spiffe_id"]
    assert spiffe_id == expected_id(pipeline, "evaluate")
    assert spiffe_id != expected_id(pipeline, "train")


@pytest.mark.parametrize(
    "case",
    ["another-tenants-namespace", "another-tenants-label", "no-step-label"],
)
def test_a_pod_the_clusterspiffeid_does_not_select_gets_no_svid(
    k8s_node: NodeCluster, team_a: str, case: str
) -> None:
    """The same labels in another namespace, another tenant's label in team-a, a pod without the
    step label: the agent issues nothing (PermissionDenied "no identity issued"), though the socket
    is mounted and the agent answers."""
    cluster = k8s_node.cluster
    pipeline = f"p{uuid.uuid4().hex[:6]}"
    namespace = team_a
    wanted = labels(pipeline, "train")
    if case == "another-tenants-namespace":
        namespace = f"team-b-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(namespace, RESTRICTED)
    elif case == "another-tenants-label":
        wanted["secureml.dev/tenant"] = "team-b"
    else:
        del wanted["secureml.dev/step"]
    manifest = step_pod(k8s_node.node.image("busybox"), wanted, timeout="4s")
    done, text = run_probe(k8s_node, namespace, manifest)
    assert done["status"]["phase"] == "Failed", (done["status"], text)
    assert "no identity issued" in text, text
    assert expected_id(pipeline, "train") not in text


def test_with_the_agent_stopped_the_fetch_fails_and_works_again_after(
    k8s_node: NodeCluster, team_a: str
) -> None:
    node = k8s_node.node
    spire = identity(k8s_node)
    pipeline = f"p{uuid.uuid4().hex[:6]}"
    with spire.agent_stopped():
        assert not Path(spire.agent_socket).exists()
        manifest = step_pod(node.image("busybox"), labels(pipeline, "train"), timeout="4s")
        done, text = run_probe(k8s_node, team_a, manifest)
        assert done["status"]["phase"] == "Failed", (done["status"], text)
        assert "svidprobe: no X.509 SVID" in text, text
        assert "spiffe_id" not in text
    # the control: the same step, the agent back, gets its ID
    done, text = run_probe(
        k8s_node, team_a, step_pod(node.image("busybox"), labels(pipeline, "train"))
    )
    assert done["status"]["phase"] == "Succeeded", (done["status"], text, spire.agent_log())
    assert json.loads(text)["spiffe_id"] == expected_id(pipeline, "train")
