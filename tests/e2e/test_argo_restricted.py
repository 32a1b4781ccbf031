"""The reference pipeline compiled for team-restricted, through Argo's real workflow-controller.

The second tenant (tests/e2e/restricted.py: profiles/team-restricted.yaml with the session's
registry and runtime image and a test Sigstore as its signer; the pipeline's GPU steps on
`WholeGPU(1)`, the only GPU its tier allows; a fake H100 in CC mode on the node) is installed
beside team-a on the e2e cluster. The Workflow KFP 2.17's API server would submit for it runs in
namespace team-restricted exactly as tests/e2e/test_argo_run.py runs team-a's, and:

- it Succeeded, each step's pod created by Argo and run on the node, under uid 3000;
- each step's audit record: its SPIFFE identity checked, config and run ok; prep without GPU
  stages (its dataset in the store); train and evaluate with the GPU's preflight (the profile's
  model and confidential computing required: the fake GPU reports CC on and ready) and the
  scrubs before and after;
- preview = reality: each step pod and each driver pod Argo created equals the preview for
  team-restricted field by field after the server's defaulting (the values only the run knows
  taken from the pod, as for team-a).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from secureml.pods.preview import preview_driver_pods
from tests.e2e import steps
from tests.e2e.argo_run import (
    BOUND,
    ArgoRun,
    delete_run,
    driver_differences,
    run_reference,
    step_record,
    with_run_values,
)
from tests.e2e.environment import E2E
from tests.e2e.restricted import RESTRICTED_POOLS, RUN_AS_USER, Restricted, restricted_tenant
from tests.support import admission

pytestmark = [pytest.mark.node, pytest.mark.cluster]

TASKS = ("prep", "train", "evaluate")
GPU_STAGES = ("preflight", "scrub-before", "scrub-after")
GPU_NAME = "NVIDIA H100 80GB HBM3"  # the fake GPU (tests/e2e/restricted.py PRODUCT)


@pytest.fixture(scope="module")
def restricted(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restricted]:
    with restricted_tenant(e2e, tmp_path_factory.mktemp("restricted")) as tenant:
        yield tenant


@pytest.fixture(scope="module")
def preview(restricted: Restricted) -> dict[str, dict[str, Any]]:
    return steps.previewed(restricted.docs, restricted.profile)


@pytest.fixture(scope="module")
def argo_run(
    e2e: E2E, restricted: Restricted, preview: dict[str, dict[str, Any]]
) -> Iterator[ArgoRun]:
    name = next(iter(preview.values()))["metadata"]["labels"]["workflows.argoproj.io/workflow"]
    run = run_reference(
        e2e, restricted.docs, name=name, profile=restricted.profile, pools=RESTRICTED_POOLS
    )
    print(f"\nteam-restricted: the Workflow {run.phase} in {run.seconds:.1f} s")
    yield run
    delete_run(e2e, name, restricted.profile.spec.namespace)


def _explain(run: ArgoRun, task: str) -> str:
    pod = run.steps.get(task, {})
    states = steps.container_states(pod) if pod else {}
    return (run.explain() + "\n" + json.dumps({"states": states, "logs": run.logs.get(task)}))[
        -6000:
    ]


def test_the_workflow_succeeds_on_the_node(e2e: E2E, argo_run: ArgoRun) -> None:
    assert argo_run.phase == "Succeeded", argo_run.explain()
    assert sorted(argo_run.steps) == sorted(TASKS), argo_run.explain()
    uid = argo_run.workflow["metadata"]["uid"]
    for task, pod in argo_run.steps.items():
        assert pod["status"]["phase"] == "Succeeded", _explain(argo_run, task)
        assert pod["spec"]["nodeName"] == e2e.node.name
        (main,) = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
        assert main["securityContext"]["runAsUser"] == RUN_AS_USER, main["securityContext"]
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("Workflow", uid)
    assert {p["status"]["phase"] for p in argo_run.drivers.values()} == {"Succeeded"}


@pytest.mark.parametrize("task", TASKS)
def test_each_step_audit_record(
    e2e: E2E, argo_run: ArgoRun, preview: dict[str, dict[str, Any]], task: str
) -> None:
    record, stages = step_record(e2e, argo_run, preview[task], task)
    if task == "prep":
        assert {stages[name] for name in GPU_STAGES} == {"skipped"}, stages
    else:
        assert {stages[name] for name in GPU_STAGES} == {"ok"}, record["stages"]
        (preflight,) = [stage for stage in record["stages"] if stage["name"] == "preflight"]
        detail = preflight["detail"]
        assert [device["name"] for device in detail["devices"]] == [GPU_NAME], detail
        assert detail["confidential_computing"]["required"] is True, detail


@pytest.mark.parametrize("task", TASKS)
def test_the_pod_argo_created_is_the_preview(
    argo_run: ArgoRun, preview: dict[str, dict[str, Any]], task: str
) -> None:
    assert task in argo_run.steps, argo_run.explain()
    created = argo_run.steps[task]
    expected = steps.as_run(preview[task], argo_run.values[task])
    found = admission.differences(with_run_values(expected, created), created)
    assert [d for d in found if not d.startswith(BOUND)] == [], found


def test_the_driver_pods_argo_created_are_the_preview(
    argo_run: ArgoRun, restricted: Restricted
) -> None:
    previewed = preview_driver_pods(argo_run.workflow_docs, restricted.profile)
    assert sorted(previewed) == sorted(n.rsplit(".", 1)[-1] for n in argo_run.drivers)
    found = driver_differences(argo_run, restricted.profile)
    assert found == dict.fromkeys(found, []), found
