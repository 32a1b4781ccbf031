"""Argo's own workflow-controller (tests/harness/argo.py) on the end-to-end node: a trivial
Workflow, in a namespace without the tenant's bundle, runs to Succeeded, its one pod created by
the controller, pulled and run by the node, its step's result reported by Argo's executor."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.environment import E2E
from tests.harness.argo import node_states
from tests.support import node_pods
from tests.support.node_pods import HARDENED, RESTRICTED

pytestmark = [pytest.mark.node, pytest.mark.cluster]

NAMESPACE = "argo-smoke"
ACCOUNT = "workflow"
GREETING = "hello from a Workflow"


@pytest.fixture(scope="module")
def smoke(e2e: E2E) -> dict[str, Any]:
    """One Workflow of one container template run to its end: the Workflow, its pods."""
    e2e.cluster.create_namespace(NAMESPACE, RESTRICTED)
    status, answer = e2e.cluster.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
    )
    assert status in (201, 409), answer
    e2e.argo.grant_executor(NAMESPACE, ACCOUNT)
    workflow = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "smoke-"},
        "spec": {
            "entrypoint": "main",
            "serviceAccountName": ACCOUNT,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "templates": [
                {
                    "name": "main",
                    "container": {
                        "image": e2e.node.image("busybox"),
                        "command": ["/bin/sh", "-c", f"echo {GREETING}"],
                        "securityContext": HARDENED,
                    },
                }
            ],
        },
    }
    name = e2e.argo.submit(workflow, NAMESPACE)["metadata"]["name"]
    done = e2e.argo.wait(NAMESPACE, name, timeout_s=180.0)
    status, pods = e2e.cluster.request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=workflows.argoproj.io/workflow%3D{name}",
    )
    assert status == 200, pods
    return {"workflow": done, "pods": pods["items"]}


def test_a_trivial_workflow_runs_to_succeeded(e2e: E2E, smoke: dict[str, Any]) -> None:
    workflow = smoke["workflow"]
    assert workflow["status"]["phase"] == "Succeeded", json.dumps(node_states(workflow), indent=1)
    (pod,) = smoke["pods"]
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Workflow", workflow["metadata"]["uid"])
    assert pod["spec"]["nodeName"] == e2e.node.name
    assert pod["status"]["phase"] == "Succeeded"
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["init"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["wait", "main"]
    main = pod["spec"]["containers"][1]
    assert main["command"][:2] == ["/var/run/argo/argoexec", "emissary"]  # Argo's emissary
    log = node_pods.log(e2e.cluster, NAMESPACE, pod["metadata"]["name"], "main")
    assert GREETING in log


def test_the_executor_reported_the_step_through_its_task_result(
    e2e: E2E, smoke: dict[str, Any]
) -> None:
    """`wait` created the node's WorkflowTaskResult with the workflow's service account (the
    executor Role), and the controller read it: the step's exit code is in the status."""
    workflow = smoke["workflow"]
    name = workflow["metadata"]["name"]
    status, results = e2e.cluster.request(
        "GET",
        f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/workflowtaskresults"
        f"?labelSelector=workflows.argoproj.io/workflow%3D{name}",
    )
    assert status == 200, results
    assert len(results["items"]) == 1, results
    (pod_node,) = [n for n in workflow["status"]["nodes"].values() if n["type"] == "Pod"]
    assert pod_node["outputs"]["exitCode"] == "0", pod_node
