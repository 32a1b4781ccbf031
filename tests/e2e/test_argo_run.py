"""The reference pipeline through Argo's real workflow-controller, under the tenant's bundle.

The Workflow KFP 2.17's API server would submit for pipelines/secure_finetune.py compiled for the
e2e tenant (tests/harness/kfp_workflow.py) is created in the tenant's namespace; Argo's controller
(tests/harness/argo.py) creates every pod, the drivers' (the kfp-driver STAND-IN, handing Argo the
pod spec patch compile's preview computes) and the steps', through the API server with the bundle
in force; the node runs them (tests/e2e/argo_run.py). Then:

- the Workflow Succeeded, each step's pod was created by Argo (owned by the Workflow) and ran on
  the node, and each step's audit record (from `main`'s log) is checked as tests/e2e/
  test_steps_run.py checks it for the pods it creates itself;
- preview = reality: each step pod Argo created against the pod `secureml.pods.preview` built for
  that task (the tenant's MAP applied), field by field after the server's defaulting
  (tests/support/admission.py `differences`), with exactly the values only the run knows filled
  in (`RUN_VALUES`); any other difference fails;
- a Workflow altered after compile (the step's image swapped, secureml's launcher removed, a GPU
  request raised, an exec hook or probe added) is refused at admission: Argo cannot create the
  pod, and the message Argo reports for the step's node and in the Workflow's status names the
  rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from secureml.core import contract
from secureml.pods.preview import preview_driver_pods
from tests.e2e import steps
from tests.e2e.argo_run import (
    BOUND,
    POOLS,
    ArgoRun,
    delete_run,
    driver_differences,
    run_reference,
    step_record,
    with_run_values,
)
from tests.e2e.environment import E2E
from tests.support import admission

pytestmark = [pytest.mark.node, pytest.mark.cluster]

GPU_STAGES = ("shim-claim", "preflight", "scrub-before", "shim", "scrub-after")


@pytest.fixture(scope="module")
def compiled(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return steps.compile_reference(
        e2e.step_image, e2e.profile_path, tmp_path_factory.mktemp("compile")
    )


@pytest.fixture(scope="module")
def preview(compiled: list[dict[str, Any]], e2e: E2E) -> dict[str, dict[str, Any]]:
    """The step pods as the server should store them (the tenant's MAP applied)."""
    return steps.previewed(compiled, e2e.profile)


@pytest.fixture(scope="module")
def argo_run(
    e2e: E2E, compiled: list[dict[str, Any]], preview: dict[str, dict[str, Any]]
) -> Iterator[ArgoRun]:
    """One run, named as the preview names its Workflow, so Argo names the pods as the
    preview does; deleted with its pods after the module (test_steps_run uses those names)."""
    name = next(iter(preview.values()))["metadata"]["labels"]["workflows.argoproj.io/workflow"]
    run = run_reference(e2e, compiled, name=name)
    print(f"\nthe Workflow {run.phase} in {run.seconds:.1f} s")
    for task, pod in run.steps.items():
        print(f"{task}: pod {pod['metadata']['name']} {pod['status']['phase']}")
    yield run
    delete_run(e2e, name)


def _explain(run: ArgoRun, task: str) -> str:
    pod = run.steps.get(task, {})
    states = steps.container_states(pod) if pod else {}
    return (run.explain() + "\n" + json.dumps({"states": states, "logs": run.logs.get(task)}))[
        -6000:
    ]


def test_the_workflow_succeeds_with_every_step_pod_created_by_argo(
    e2e: E2E, argo_run: ArgoRun
) -> None:
    assert argo_run.phase == "Succeeded", argo_run.explain()
    assert sorted(argo_run.steps) == ["evaluate", "prep", "train"], argo_run.explain()
    uid = argo_run.workflow["metadata"]["uid"]
    for task, pod in argo_run.steps.items():
        assert pod["status"]["phase"] == "Succeeded", _explain(argo_run, task)
        assert pod["spec"]["nodeName"] == e2e.node.name
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Workflow", uid, True)
    # the root DAG's driver and one per step, the kfp-driver STAND-IN under Argo
    drivers = {name.rsplit(".", 1)[-1] for name in argo_run.drivers}
    assert drivers == {"root-driver", "prep-driver", "train-driver", "evaluate-driver"}, drivers
    assert {p["status"]["phase"] for p in argo_run.drivers.values()} == {"Succeeded"}


@pytest.mark.parametrize("task", ["prep", "train", "evaluate"])
def test_each_step_audit_record(
    e2e: E2E, argo_run: ArgoRun, preview: dict[str, dict[str, Any]], task: str
) -> None:
    _, stages = step_record(e2e, argo_run, preview[task], task)
    if task == "prep":  # no GPU
        assert {stages[name] for name in GPU_STAGES} == {"skipped"}, stages
    else:
        assert stages["preflight"] == stages["scrub-before"] == stages["scrub-after"] == "ok"
        shim = "ok" if task == "evaluate" else "skipped"  # the time-sliced share runs under it
        assert stages["shim-claim"] == stages["shim"] == shim, stages


@pytest.mark.parametrize("task", ["prep", "train", "evaluate"])
def test_the_pod_argo_created_is_the_preview(
    argo_run: ArgoRun, preview: dict[str, dict[str, Any]], task: str
) -> None:
    """Preview = reality: the step's pod as the real controller created it and the server
    stored it (defaulting, ServiceAccount admission, the tenant's MAP) against the preview of
    that task with the run's values filled in. Any other difference fails."""
    assert task in argo_run.steps, argo_run.explain()
    created = argo_run.steps[task]
    expected = steps.as_run(preview[task], argo_run.values[task])
    assert created["metadata"]["name"] == expected["metadata"]["name"]
    found = admission.differences(with_run_values(expected, created), created)
    assert [d for d in found if not d.startswith(BOUND)] == [], found


def test_the_driver_pods_argo_created_are_the_preview(argo_run: ArgoRun, e2e: E2E) -> None:
    """The drivers' pods (the kfp-driver STAND-IN's image in KFP's driver templates) against
    `preview_driver_pods` (tests/e2e/argo_run.py `driver_differences`)."""
    previewed = preview_driver_pods(argo_run.workflow_docs, e2e.profile)
    assert sorted(previewed) == sorted(n.rsplit(".", 1)[-1] for n in argo_run.drivers)
    found = driver_differences(argo_run, e2e.profile)
    assert found == dict.fromkeys(found, []), found


# --- a Workflow altered after compile ---------------------------------------------------------


def _impl_templates(workflow: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for template in workflow["spec"]["templates"]:
        if template["name"].endswith("system-container-impl"):
            yield template


def _patched(patches: dict[str, str], task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    patch = json.loads(patches[task])
    main = next(c for c in patch["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    return patch, main


def _swap_image(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """prep's image swapped for another of the allowed registry (the runtime image's digest):
    in the Workflow's container argument of prep's driver, and so in what KFP's driver computes
    from it."""
    image = _RUNTIME_IMAGE[0]
    (root,) = [t for t in workflow["spec"]["templates"] if t["name"] == "root"]
    (driver,) = [t for t in root["dag"]["tasks"] if t["name"] == "prep-driver"]
    (container,) = [p for p in driver["arguments"]["parameters"] if p["name"] == "container"]
    name = container["value"].removeprefix("{{workflow.parameters.").removesuffix("}}")
    (parameter,) = [p for p in workflow["spec"]["arguments"]["parameters"] if p["name"] == name]
    parameter["value"] = json.dumps({**json.loads(parameter["value"]), "image": image})
    patch, main = _patched(patches, "prep")
    main["image"] = image
    patches["prep"] = json.dumps(patch)


def _remove_launcher(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """prep's command without secureml's launcher in front of the step."""
    patch, main = _patched(patches, "prep")
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
    assert main["args"][: len(prefix)] == prefix, main["args"][:4]
    main["args"] = main["args"][len(prefix) :]
    patches["prep"] = json.dumps(patch)


def _raise_gpu(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """evaluate's time-sliced share raised from one share to two."""
    patch, main = _patched(patches, "evaluate")
    limits = main["resources"]["limits"]
    assert limits == {"nvidia.com/gpu.shared": "1"}, limits
    limits["nvidia.com/gpu.shared"] = "2"
    patches["evaluate"] = json.dumps(patch)


def _add_hook(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """A postStart exec hook on every step's main container (the Workflow's template)."""
    for template in _impl_templates(workflow):
        template["container"]["lifecycle"] = {"postStart": {"exec": {"command": ["/bin/true"]}}}


def _add_probe(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """An exec liveness probe on every step's main container (the Workflow's template)."""
    for template in _impl_templates(workflow):
        template["container"]["livenessProbe"] = {"exec": {"command": ["/bin/true"]}}


_RUNTIME_IMAGE: list[str] = []  # the session's runtime image, set by the fixture below
ALTERATIONS = {  # the change, the step it hits, the rule the refusal names
    "image-swapped": (_swap_image, "prep", "secureml.launcherEnv"),  # SECUREML_IMAGE: compile's
    "launcher-removed": (_remove_launcher, "prep", "secureml.launcherArgv"),
    "gpu-raised": (_raise_gpu, "evaluate", "secureml.timeSliceCount"),
    # a hook or probe in the template reaches the pod twice: on `main` (noExecHandlers) and as a
    # key of the template Argo hands its executor in ARGO_TEMPLATE (systemContainers); the server
    # names the first validation that fails
    "hook-added": (_add_hook, "prep", "secureml.noExecHandlers|secureml.systemContainers"),
    "probe-added": (_add_probe, "prep", "secureml.noExecHandlers|secureml.systemContainers"),
}


@pytest.fixture(scope="module")
def altered_runs(e2e: E2E, compiled: list[dict[str, Any]]) -> dict[str, ArgoRun]:
    """Each alteration as a Workflow of its own, after the unaltered run."""
    _RUNTIME_IMAGE[:] = [e2e.runtime_image]
    with ThreadPoolExecutor(max_workers=len(ALTERATIONS)) as pool:  # at once: one node, pool {}
        futures = {
            alteration: pool.submit(
                run_reference,
                e2e,
                compiled,
                name=f"altered-{alteration}",
                alter=change,
                timeout_s=300.0,
                logs=False,
            )  # fmt: skip
            for alteration, (change, _, _) in ALTERATIONS.items()
        }
        return {alteration: future.result() for alteration, future in futures.items()}


@pytest.mark.parametrize("alteration", sorted(ALTERATIONS))
def test_an_altered_workflow_is_refused_naming_the_rule(
    e2e: E2E, altered_runs: dict[str, ArgoRun], alteration: str
) -> None:
    """Argo could not create the step's pod: its node is in Error with the server's refusal,
    which names the rule, as does the Workflow's Warning event (what `kubectl describe` and
    `argo get` show); the Workflow ends in Error, every step before it Succeeded."""
    _, task, rule = ALTERATIONS[alteration]
    run = altered_runs[alteration]
    assert run.phase == "Error", run.explain()
    assert task not in run.steps, f"Argo created {task}'s pod: {run.explain()}"
    nodes = run.workflow["status"]["nodes"].values()
    (node,) = [n for n in nodes if n["name"].endswith(f".root.{task}.executor")]
    assert node["phase"] == "Error", node
    assert "is forbidden: ValidatingAdmissionPolicy" in node["message"], node["message"]
    named = [r for r in rule.split("|") if f"denied request: {r}:" in node["message"]]
    assert named, node["message"]
    for before in list(POOLS)[: list(POOLS).index(task)]:
        assert run.steps[before]["status"]["phase"] == "Succeeded", run.explain()
    name = run.workflow["metadata"]["name"]
    deadline = time.monotonic() + 30  # Argo records its events a moment after the status
    while True:
        status, events = e2e.cluster.request(
            "GET",
            f"/api/v1/namespaces/{e2e.namespace}/events?fieldSelector=involvedObject.name%3D{name}",
        )
        assert status == 200, events
        errors = [e["message"] for e in events["items"] if e["reason"] == "WorkflowNodeError"]
        if errors or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert any(named[0] in message for message in errors), errors
