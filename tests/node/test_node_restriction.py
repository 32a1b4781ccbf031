"""A node's credential as production gives it: the kubelet's `system:node:<name>` certificate,
judged by the Node authorizer and the NodeRestriction admission plugin of the test control plane.
It may write its own Node; it may not touch another node's Node or pods, nor create a pod bound to
another node (a stolen node credential must not reach pods elsewhere)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support import node_pods as pods
from tests.support.node_pods import NodeCluster

pytestmark = [pytest.mark.node, pytest.mark.cluster]


@pytest.fixture(scope="module")
def other_node(k8s_node: NodeCluster) -> str:
    """A second Node (no kubelet behind it), created by the admin."""
    name = f"other-node-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    status, answer = k8s_node.cluster.request("POST", "/api/v1/nodes", body)
    assert status == 201, answer
    return name


def _bound_pod(name: str, node: str, image: str, mirror: bool = False) -> dict[str, Any]:
    manifest = pods.pod(name, image, "true")
    manifest["spec"]["nodeName"] = node
    if mirror:  # what a kubelet may create: the mirror of a static pod, on itself
        manifest["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "static"}
    return manifest


def _refused(answer: Any, status: int, *fragments: str) -> None:
    assert status == 403, (status, answer)
    message = answer["message"]
    assert all(fragment in message for fragment in fragments), message


def test_a_node_writes_its_own_node_object(k8s_node: NodeCluster) -> None:
    node = k8s_node.node
    status, answer = node.request_as_node(
        "PATCH", f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {"secureml.dev/probe": "1"}}}
    )
    assert status == 200, answer


def test_a_node_cannot_modify_another_node(k8s_node: NodeCluster, other_node: str) -> None:
    status, answer = k8s_node.node.request_as_node(
        "PATCH", f"/api/v1/nodes/{other_node}", {"metadata": {"labels": {"secureml.dev/x": "1"}}}
    )
    _refused(answer, status, "is not allowed to modify node", other_node)


def test_a_node_cannot_touch_another_nodes_pods(k8s_node: NodeCluster, other_node: str) -> None:
    cluster, node = k8s_node.cluster, k8s_node.node
    namespace = k8s_node.namespace()
    pods.create(cluster, namespace, _bound_pod("elsewhere", other_node, node.image("busybox")))
    path = f"/api/v1/namespaces/{namespace}/pods/elsewhere"
    status, answer = node.request_as_node(
        "PATCH", f"{path}/status", {"status": {"phase": "Succeeded"}}
    )
    _refused(answer, status, "can only update pod status for pods with spec.nodeName set to itself")
    status, answer = node.request_as_node("DELETE", path)
    _refused(answer, status, "can only delete pods with spec.nodeName set to itself")
    _, still = cluster.request("GET", path)
    assert (
        still["status"].get("phase") == "Pending" and "deletionTimestamp" not in still["metadata"]
    )


def test_a_node_cannot_create_pods_bound_elsewhere(k8s_node: NodeCluster, other_node: str) -> None:
    node = k8s_node.node
    namespace = k8s_node.namespace()
    path = f"/api/v1/namespaces/{namespace}/pods"
    image = node.image("busybox")
    status, answer = node.request_as_node(
        "POST", path, _bound_pod("mirror-elsewhere", other_node, image, mirror=True)
    )
    _refused(answer, status, "can only create pods with spec.nodeName set to itself")
    # nor an ordinary pod on itself: a kubelet creates only the mirrors of its static pods
    status, answer = node.request_as_node("POST", path, _bound_pod("ordinary", node.name, image))
    _refused(answer, status, "can only create mirror pods")
