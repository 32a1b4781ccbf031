"""One run of the reference pipeline through Argo's real workflow-controller (tests/e2e).

`run_reference(e2e, docs, name=..., namespace=...)` submits the Workflow KFP 2.17's API server
would create for the compiled pipeline (tests/harness/kfp_workflow.py `kfp_workflow`, under the
run's service account `secureml-pipeline-runner`) to the controller of the `e2e` environment, and
puts each task's pod spec patch (`driver_patches`: what KFP's container driver computes, the
preview's, with the run's values of tests/e2e/steps.py filled in) in the run's object store, where
the kfp-driver STAND-IN fetches it (`patch_key`). Argo creates every pod: the drivers', then each
step's. While the run goes on, the node is given the pool labels of the step whose pod waits for a
node (`POOLS`: the CPU step keeps off the time-sliced pool, evaluate needs it; one node here). It
returns the finished Workflow and every pod of it, with the logs of each step's containers.

`alter(workflow, patches)`, when given, changes the Workflow and the patches before the submit:
what a tenant could do to a compiled run after `secureml compile` judged it.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from secureml.core import contract
from tests.e2e import steps
from tests.e2e.environment import E2E
from tests.harness.argo import DONE, node_states
from tests.harness.controlplane import HarnessError
from tests.harness.kfp_workflow import driver_patches, kfp_workflow, patch_key
from tests.support import node_pods

# The node's pool per step: the labels its node selector or affinity asks for.
POOLS: dict[str, dict[str, str]] = {
    "prep": {},
    "train": {},
    "evaluate": {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
}
STEP_CONTAINERS = ("init", "kfp-launcher", contract.RUNTIME_INIT_CONTAINER, "wait", "main")
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME = "workflows.argoproj.io/node-name"
RUNTIME_ROLE = "pipelines.kubeflow.org/runtime-role"

Alteration = Callable[[dict[str, Any], dict[str, str]], None]


@dataclass
class ArgoRun:
    workflow: dict[str, Any]  # as it finished
    steps: dict[str, dict[str, Any]]  # each step's (executor) pod, by task
    drivers: dict[str, dict[str, Any]]  # each driver pod, by Argo node name
    logs: dict[str, dict[str, str]]  # each step's containers' logs
    values: dict[str, dict[str, str]]  # the run's values filled into each step's patch
    seconds: float  # from submit to the Workflow's end
    workflow_docs: list[dict[str, Any]]  # the compiled pipeline it ran

    @property
    def phase(self) -> str:
        return str(self.workflow["status"]["phase"])

    def explain(self) -> str:
        """The nodes' phases and messages, for an assertion."""
        return "\n".join(
            f"{name}: {node['type']} {node['phase']} {node['message']}"
            for name, node in node_states(self.workflow).items()
        )


def run_values(docs: list[dict[str, Any]], e2e: E2E) -> dict[str, dict[str, str]]:
    """KFP's run-time values for each step (tests/e2e/steps.py `run_values`)."""
    submitted = steps.previewed(docs, e2e.profile, mutate=False)
    return {
        task: steps.run_values(docs, pod, task, execution=index + 1)
        for index, (task, pod) in enumerate(submitted.items())
    }


def run_reference(
    e2e: E2E,
    docs: list[dict[str, Any]],
    *,
    name: str,
    namespace: str | None = None,
    alter: Alteration | None = None,
    timeout_s: float = 420.0,
    logs: bool = True,
) -> ArgoRun:
    namespace = namespace or e2e.namespace
    workflow = kfp_workflow(
        docs, name=name, namespace=namespace, service_account=contract.RUNNER_NAME
    )
    values = run_values(docs, e2e)
    patches = driver_patches(docs, values)
    if alter is not None:
        alter(workflow, patches)
    _delete_pods(e2e, namespace, name)  # pods of an earlier run of this name (Argo would adopt)
    for task, patch in patches.items():
        e2e.store.objects[patch_key(name, task)] = patch.encode()
    started = time.monotonic()
    e2e.argo.submit(workflow, namespace)
    deadline = started + timeout_s
    while True:
        finished = e2e.argo.get(namespace, name)
        if (finished.get("status") or {}).get("phase") in DONE:
            break
        if time.monotonic() > deadline:
            raise HarnessError(
                f"Workflow {name} did not finish in {timeout_s:.0f} s: "
                f"{node_states(finished)}\nthe controller's log ends:\n{e2e.argo.log(30)}"
            )
        for pod in _pods(e2e, namespace, name):
            task = _task(pod)
            if task in POOLS and not pod["spec"].get("nodeName") and e2e.pools != POOLS[task]:
                e2e.pool(POOLS[task])
        time.sleep(0.2)
    seconds = time.monotonic() - started
    step_pods, drivers = {}, {}
    for pod in _pods(e2e, namespace, name):
        if pod["metadata"]["annotations"].get(RUNTIME_ROLE) == "launcher":
            step_pods[_task(pod)] = pod
        else:
            drivers[pod["metadata"]["annotations"][NODE_NAME]] = pod
    step_logs = {
        task: {c: _log(e2e, namespace, pod, c) for c in STEP_CONTAINERS} if logs else {}
        for task, pod in step_pods.items()
    }
    return ArgoRun(finished, step_pods, drivers, step_logs, values, seconds, docs)


def _task(pod: dict[str, Any]) -> str:
    """The task of a step pod: its Argo node is `<workflow>.root.<task>.executor`."""
    parts = pod["metadata"]["annotations"].get(NODE_NAME, "").split(".")
    return parts[-2] if len(parts) >= 4 and parts[-1] == "executor" else ""


def _pods(e2e: E2E, namespace: str, workflow: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"{WORKFLOW_LABEL}={workflow}")
    status, answer = e2e.cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    )
    if status != 200:
        raise HarnessError(f"listing the pods of {workflow}: HTTP {status}: {answer}")
    return [{"apiVersion": "v1", "kind": "Pod", **pod} for pod in answer["items"]]  # as a GET


def delete_run(e2e: E2E, name: str, namespace: str | None = None) -> None:
    """Delete Workflow `name` and its pods: the other e2e modules of the session create pods
    under the names the preview gives, which are the names Argo gave this run's."""
    namespace = namespace or e2e.namespace
    e2e.cluster.request(
        "DELETE", f"/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows/{name}"
    )
    _delete_pods(e2e, namespace, name)


def _delete_pods(e2e: E2E, namespace: str, workflow: str) -> None:
    for pod in _pods(e2e, namespace, workflow):
        e2e.cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
    deadline = time.monotonic() + 60
    while _pods(e2e, namespace, workflow):
        if time.monotonic() > deadline:
            raise HarnessError(f"the pods of an earlier {workflow} were not deleted in 60 s")
        time.sleep(0.2)


def _log(e2e: E2E, namespace: str, pod: dict[str, Any], container: str) -> str:
    try:
        return node_pods.log(e2e.cluster, namespace, pod["metadata"]["name"], container)
    except AssertionError as error:
        return f"<no log: {error}>"
