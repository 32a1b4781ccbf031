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

import copy
import json
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from secureml.core import contract
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.preview import preview_driver_pods
from secureml.profile.model import TenantProfile
from tests.e2e import steps
from tests.e2e.environment import E2E, IDENTITY_REQUIRED
from tests.harness.argo import DONE, node_states
from tests.harness.controlplane import HarnessError
from tests.harness.kfp_workflow import driver_patches, kfp_workflow, patch_key
from tests.support import admission, node_pods

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


def run_values(
    docs: list[dict[str, Any]], e2e: E2E, profile: TenantProfile | None = None
) -> dict[str, dict[str, str]]:
    """KFP's run-time values for each step (tests/e2e/steps.py `run_values`), for the e2e
    tenant or `profile`."""
    submitted = steps.previewed(docs, profile or e2e.profile, mutate=False)
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
    profile: TenantProfile | None = None,
    pools: dict[str, dict[str, str]] = POOLS,
) -> ArgoRun:
    """The compiled pipeline's run in the e2e tenant's namespace, or `profile`'s (the tenant it
    was compiled for), each step's node given `pools[task]`."""
    namespace = namespace or (profile.spec.namespace if profile else e2e.namespace)
    workflow = kfp_workflow(
        docs, name=name, namespace=namespace, service_account=contract.RUNNER_NAME
    )
    values = run_values(docs, e2e, profile)
    patches = driver_patches(docs, values)
    if alter is not None:
        alter(workflow, patches)
    return run_workflow(
        e2e,
        workflow,
        patches,
        docs=docs,
        values=values,
        timeout_s=timeout_s,
        logs=logs,
        pools=pools,
    )


def run_workflow(
    e2e: E2E,
    workflow: dict[str, Any],
    patches: dict[str, str],
    *,
    docs: list[dict[str, Any]],
    values: dict[str, dict[str, str]],
    timeout_s: float = 420.0,
    logs: bool = True,
    pools: dict[str, dict[str, str]] = POOLS,
) -> ArgoRun:
    """Submit `workflow` (named, with its namespace) with each task's driver patch published,
    and wait until it is done: what `run_reference` does for any Workflow of KFP's shape."""
    name, namespace = workflow["metadata"]["name"], workflow["metadata"]["namespace"]
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
            if task in pools and not pod["spec"].get("nodeName") and e2e.pools != pools[task]:
                e2e.pool(pools[task])
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


# What only the run knows, which the preview cannot: the Workflow's UID (Argo's executor gets
# it as ARGO_WORKFLOW_UID; the preview shows the run id there, which KFP puts where the compiled
# Workflow says {{workflow.uid}}), the owner reference Argo sets, and Argo's own bookkeeping once
# the step is done (the `completed` label). ARGO_TEMPLATE is the whole template as JSON, which
# secureml.pods.argo abbreviates to the template's name (checked: the name is the same).
WORKFLOW_UID_ENV = "ARGO_WORKFLOW_UID"
TEMPLATE_ENV = "ARGO_TEMPLATE"
COMPLETED = "workflows.argoproj.io/completed"
BOUND = (".spec.nodeName:",)  # the scheduler's binding
PLACEHOLDER = re.compile(r"^<[a-z_]+>$")


def _env(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
        yield from container.get("env", [])


def with_run_values(expected: dict[str, Any], created: dict[str, Any]) -> dict[str, Any]:
    """The preview with what only the run knows taken from the pod Argo created."""
    expected = copy.deepcopy(expected)
    uid = created["metadata"]["ownerReferences"][0]["uid"]
    for item in _env(expected):
        if item["name"] == WORKFLOW_UID_ENV:
            item["value"] = uid
    templates = {
        item["name"]: item["value"] for item in _env(created) if item["name"] == TEMPLATE_ENV
    }
    for item in _env(expected):
        if item["name"] == TEMPLATE_ENV:
            assert json.loads(templates[TEMPLATE_ENV])["name"] == json.loads(item["value"])["name"]
            item["value"] = templates[TEMPLATE_ENV]
    expected["metadata"]["labels"][COMPLETED] = created["metadata"]["labels"][COMPLETED]
    expected["metadata"]["ownerReferences"] = created["metadata"]["ownerReferences"]
    return expected


def driver_differences(run: ArgoRun, profile: TenantProfile) -> dict[str, list[str]]:
    """Per driver pod Argo created (by its Argo node), its differences from `preview_driver_pods` (the tenant's
    MAP applied) after the server's defaulting, the scheduler's binding left out. The preview
    shows what KFP fills in per run as `<name>` (run id and name, create time, the DAG's
    execution id, the task's component, task, container and kubernetes config) and no display
    name; those are taken from the pod Argo created (the run id and name checked)."""
    previewed = preview_driver_pods(run.workflow_docs, profile)
    found = {}
    for node, created in run.drivers.items():
        expected = apply_mutations(previewed[node.rsplit(".", 1)[-1]], profile)
        main = next(c for c in expected["spec"]["containers"] if c["name"] == "main")
        real = next(c for c in created["spec"]["containers"] if c["name"] == "main")["args"]
        for index, arg in enumerate(main["args"]):
            if PLACEHOLDER.match(arg) or main["args"][index - 1] == "--run_display_name":
                main["args"][index] = real[index]
        given = dict(zip(real[::2], real[1::2], strict=False))
        assert given["--run_id"] == created["metadata"]["labels"]["pipeline/runid"]
        assert given["--run_name"] == run.workflow["metadata"]["name"]
        differences = admission.differences(with_run_values(expected, created), created)
        found[node] = [d for d in differences if not d.startswith(BOUND)]
    return found


def step_record(
    e2e: E2E, run: ArgoRun, previewed: dict[str, Any], task: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """The step's audit record (from `main`'s log) and its stages' statuses by name, checked as
    every run checks it: the SPIFFE ID and image digest the preview announced, exit 0, the
    identity stage (ok where `IDENTITY_REQUIRED`), config and run ok; for prep, its dataset in
    the run's store (the launcher stand-in uploaded it)."""
    assert task in run.steps, run.explain()
    record = steps.audit_record(run.logs[task]["main"])
    annotations = previewed["metadata"]["annotations"]
    assert record["expected_spiffe_id"] == annotations[contract.ANNOTATION_SPIFFE_ID]
    assert record["image_digest"] == annotations[contract.ANNOTATION_IMAGE_DIGEST]
    assert record["exit_code"] == 0, record
    stages = {stage["name"]: stage["status"] for stage in record["stages"]}
    print(f"{task}: audit stages {stages}")
    assert stages["identity"] == ("ok" if IDENTITY_REQUIRED else "skipped"), record["stages"]
    assert stages["config"] == stages["run"] == "ok", record["stages"]
    if task == "prep":
        run_id = run.steps[task]["metadata"]["labels"]["pipeline/runid"]
        key = f"{steps.run_root(run_id).removeprefix('minio://')}/prep/dataset"
        assert len(json.loads(e2e.store.objects[key])) == steps.ROWS
    return record, stages
