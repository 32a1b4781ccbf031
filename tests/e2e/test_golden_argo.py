"""KFP's own 2.17.0 golden Workflows on Argo's real workflow-controller, under the tenant's bundle.

Each golden of ../shared/fixtures/kfp-golden (hello_world, pvc_mount, secret_as_volume: KFP's own
compiler output, plain KFP pipelines that secureml never compiled) is submitted as a Workflow of
its own, all at once, to the e2e session's controller in the e2e tenant's namespace. The harness
changes a golden only where a run here must (tests/harness/kfp_golden.py `HARNESS_CHANGES`):

- `metadata`: a fixed name (the preview's `<pipeline>-p7x2k`, so the pods get the preview's
  names) instead of `generateName`, the tenant's namespace, and what KFP's API server adds for a
  run (the `pipeline/runid` label, the run-name annotation, `{{workflow.uid}}` -> the run id,
  `pipeline/runid` on every pod, `sidecar.istio.io/inject: "false"` on every template);
- `spec.serviceAccountName`: `pipeline-runner` -> `secureml-pipeline-runner`, the runner the
  bundle admits;
- the driver and launcher images: `:latest` -> `:2.17.0` (what KFP 2.17.0's manifests pin), which
  the node pulls from the session's registry (the kfp-driver and kfp-launcher STAND-INs, mirrored
  as `ghcr.io`); the drivers' `--run_display_name` the run's name, and the API server's
  deployment flags `--log_level 1 --publish_logs true` on the drivers and the launcher copy;
- pvc_mount's root runtime config: its `pvc_name` input has no default, so the run gives one.

The steps' own images (`registry.access.redhat.com/ubi9/python-311:latest`, `python:3.11`) are
kept: the bundle refuses those pods before any image is pulled. The kfp-driver STAND-IN hands
Argo the pod spec patch compile's preview computes (`secureml.pods.preview.
driver_pod_spec_patches`, with the run's values and the run's claim and secret names filled in,
tests/harness/kfp_golden.py `golden_patches`).

Then, for every pod Argo tries to create:

- the drivers' pods are admitted, as the preview said (the offline rules find nothing in
  `preview_driver_pods`), ran to Succeeded, and equal the preview field by field after the
  server's defaulting (tests/e2e/argo_run.py `driver_differences`);
- each step's pod is refused, as the preview said: the offline rules (`secureml.rules`) find
  violations in the previewed pod (no secureml launcher, an image outside the allowed registries
  and not pinned, ...), and Argo cannot create it. The pod Argo sent (the API server's audit log
  keeps each pod create as sent, after the server's defaulting and before admission,
  `ControlPlane.pod_create_requests`) is the previewed pod field by field (tests/cluster/
  admission.py `differences`), with only what the run alone knows taken from it (the Workflow's
  UID, the owner reference, the whole template in `ARGO_TEMPLATE`); the offline rules find in it exactly the
  rules they find in the preview; and the refusal Argo reports on the step's node names rules of
  that set: PodSecurity, which answers first and lists every check that fails, names exactly the
  preview's `pss.*` rules (a ValidatingAdmissionPolicy refusal names one rule, which must be
  among the preview's). A step that depends on a refused one is never tried.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from secureml.admission.server import message_findings
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.preview import preview_driver_pods, preview_pods
from secureml.rules import rules_for_profile
from secureml.rules.engine import evaluate
from tests.e2e import steps
from tests.e2e.argo_run import (
    ArgoRun,
    delete_run,
    driver_differences,
    run_workflow,
    with_run_values,
)
from tests.e2e.environment import E2E
from tests.harness.kfp_golden import (
    GOLDEN_VERSION,
    adapt_golden,
    golden_patches,
    name_volumes,
    run_values,
    task_kubernetes,
)
from tests.harness.kfp_workflow import pipeline_from_workflow, preview_run_id
from tests.support import admission
from tests.support.admission import PIPELINE_RUNNER
from tests.support.paths import fixture_dir

pytestmark = [pytest.mark.node, pytest.mark.cluster]

# Each golden and the run's values of its pipeline inputs that have no default.
GOLDENS: dict[str, dict[str, Any]] = {
    "hello_world": {},
    "pvc_mount": {"pvc_name": "golden-pvc"},
    "secret_as_volume": {},
}


@dataclass
class GoldenRun:
    run: ArgoRun
    previewed: dict[str, dict[str, Any]]  # each task's pod as Argo should send it
    predicted: dict[str, list[str]]  # each task's rule ids, as the offline rules judge its pod
    dependencies: dict[str, list[str]]  # each task's dependent tasks


def _previewed(
    docs: list[dict[str, Any]], e2e: E2E, values: dict[str, dict[str, str]], parameters: Any
) -> dict[str, dict[str, Any]]:
    """Each previewed step pod as Argo sends it (before the tenant's MAP), the run's values and
    the run's claim and secret names filled in."""
    found = {}
    for task, pod in preview_pods(docs, e2e.profile, mutate=False).items():
        filled = steps.as_run(pod, values[task])
        name_volumes(filled["spec"], task_kubernetes(docs, task), parameters)
        found[task] = filled
    return found


def _rules(pod: dict[str, Any], e2e: E2E) -> list[str]:
    """The rules the offline engine finds in a pod as sent (the tenant's MAP applied first)."""
    violations = evaluate(apply_mutations(pod, e2e.profile), rules_for_profile(e2e.profile))
    return [v.rule for v in violations]


def _submit(e2e: E2E, golden_name: str) -> GoldenRun:
    path = fixture_dir("kfp-golden") / f"workflow-golden-{GOLDEN_VERSION}-{golden_name}.yaml"
    golden = yaml.safe_load(path.read_text())
    docs = pipeline_from_workflow(golden)
    pipeline = docs[0]["pipelineInfo"]["name"]
    previewed = preview_driver_pods(docs, e2e.profile)["root-driver"]
    name = previewed["metadata"]["labels"]["workflows.argoproj.io/workflow"]
    run_id = preview_run_id(e2e.namespace, pipeline)
    inputs = docs[0]["root"].get("inputDefinitions", {}).get("parameters", {})
    parameters = {
        **{key: item["defaultValue"] for key, item in inputs.items() if "defaultValue" in item},
        **GOLDENS[golden_name],
    }
    workflow = adapt_golden(
        golden,
        name=name,
        namespace=e2e.namespace,
        run_id=run_id,
        parameter_values=GOLDENS[golden_name],
    )
    values = run_values(docs, run_id)
    patches = golden_patches(docs, values, parameters)
    previewed_steps = _previewed(docs, e2e, values, parameters)
    predicted = {task: _rules(pod, e2e) for task, pod in previewed_steps.items()}
    run = run_workflow(
        e2e, workflow, patches, docs=docs, values=values, timeout_s=300.0, logs=False
    )
    tasks = docs[0]["root"]["dag"]["tasks"]
    dependencies = {task: list(spec.get("dependentTasks", [])) for task, spec in tasks.items()}
    return GoldenRun(run, previewed_steps, predicted, dependencies)


@pytest.fixture(scope="module")
def golden_runs(e2e: E2E) -> Iterator[dict[str, GoldenRun]]:
    """Every golden at once, each its own Workflow; deleted with their pods after the module."""
    with ThreadPoolExecutor(max_workers=len(GOLDENS)) as pool:
        futures = {name: pool.submit(_submit, e2e, name) for name in GOLDENS}
        runs = {name: future.result() for name, future in futures.items()}
    for name, golden in runs.items():
        print(f"\n{name}: the Workflow {golden.run.phase} in {golden.run.seconds:.1f} s")
    yield runs
    for golden in runs.values():
        delete_run(e2e, golden.run.workflow["metadata"]["name"])


@pytest.mark.parametrize("golden", sorted(GOLDENS))
def test_the_drivers_are_admitted_as_previewed(
    e2e: E2E, golden_runs: dict[str, GoldenRun], golden: str
) -> None:
    run = golden_runs[golden].run
    rules = rules_for_profile(e2e.profile)
    for task, pod in preview_driver_pods(run.workflow_docs, e2e.profile).items():
        assert evaluate(apply_mutations(pod, e2e.profile), rules) == [], task
    # the root DAG's driver and the driver of each step that depends on none (the others wait
    # for a step the bundle refuses)
    first = [t for t, needs in golden_runs[golden].dependencies.items() if not needs]
    ran = sorted(node.rsplit(".", 1)[-1] for node in run.drivers)
    assert ran == sorted(["root-driver", *(f"{t}-driver" for t in first)]), run.explain()
    assert {p["status"]["phase"] for p in run.drivers.values()} == {"Succeeded"}, run.explain()
    found = driver_differences(run, e2e.profile)
    assert found == dict.fromkeys(found, []), found


def _sent(e2e: E2E, pod_name: str) -> dict[str, Any]:
    """The pod Argo's controller sent for `pod_name`, from the API server's audit log: each try
    the same pod, each refused (403)."""
    tries = [
        event
        for event in e2e.cluster.pod_create_requests()
        if event["objectRef"].get("name") == pod_name
        and event["objectRef"].get("namespace") == e2e.namespace
        and event["user"]["username"] == PIPELINE_RUNNER
    ]
    assert tries, f"no create of {pod_name} by {PIPELINE_RUNNER} in the audit log"
    assert {event["responseStatus"]["code"] for event in tries} == {403}, tries[-1]
    sent = [event["requestObject"] for event in tries]
    assert all(pod == sent[0] for pod in sent), "Argo sent different pods under one name"
    return dict(sent[0])


@pytest.mark.parametrize("golden", sorted(GOLDENS))
def test_each_step_pod_argo_sent_is_the_preview_refused_as_predicted(
    e2e: E2E, golden_runs: dict[str, GoldenRun], golden: str
) -> None:
    result = golden_runs[golden]
    run = result.run
    assert run.phase == "Error", run.explain()
    assert run.steps == {}, f"Argo created a step pod: {run.explain()}"
    nodes = {n["name"]: n for n in run.workflow["status"]["nodes"].values()}
    name = run.workflow["metadata"]["name"]
    tried = 0
    for task, predicted in result.predicted.items():
        assert predicted, f"{golden}/{task}: the preview admits a plain KFP step"
        node = nodes.get(f"{name}.root.{task}.executor")
        if result.dependencies[task]:  # after a refused step: never tried
            assert node is None, node
            continue
        assert node is not None and node["phase"] == "Error", run.explain()
        expected = result.previewed[task]
        sent = _sent(e2e, expected["metadata"]["name"])
        found = admission.differences(with_run_values(expected, sent), sent)
        assert found == [], found
        assert _rules(sent, e2e) == predicted
        named = [v.rule for v in message_findings(node["message"])]
        print(f"{golden}/{task}: refused, {named}; predicted {predicted}")
        if all(rule.startswith("pss.") for rule in named):  # PodSecurity lists every check
            assert sorted(named) == sorted(r for r in predicted if r.startswith("pss.")), named
        assert named and set(named) <= set(predicted), (named, predicted, node["message"])
        tried += 1
    assert tried, run.explain()
