"""The reference pipeline's step pods, as `secureml compile` previews them, run on the real node
under the tenant's bundle (tests/e2e/conftest.py): created through the API server (mutating and
validating admission policies, PodSecurity, quota), scheduled by kube-scheduler, pulled by
containerd through the registry mirror and run by the kubelet: Argo's real `init`, `wait` and
emissary, the kfp-launcher stand-in, the platform runtime injected by the MAP, secureml's launcher.
Each step's audit record is read back from its log through the API server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from secureml.core import contract
from tests.e2e import steps
from tests.e2e.environment import E2E, IDENTITY_REQUIRED
from tests.support import admission, node_pods
from tests.support.admission import PIPELINE_RUNNER

pytestmark = [pytest.mark.node, pytest.mark.cluster]

# The identity stage: the tenant requires identity (tests/e2e/environment.py), so each step's
# launcher fetches its X.509 SVID from the node's SPIRE agent through the socket the SPIFFE CSI
# driver mounted, and compares it with the ID the rendered ClusterSPIFFEID gives the step.
IDENTITY = "ok" if IDENTITY_REQUIRED else "skipped"

# The node's pool per step: the labels a step's node selector or affinity asks for, and the
# GPU its container requests comes from the node's fake device plugins (tests/e2e/environment.py).
POOLS: dict[str, dict[str, str]] = {
    "prep": {},
    "train": {},
    "evaluate": {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
}


@pytest.fixture(scope="module")
def compiled(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return steps.compile_reference(
        e2e.step_image, e2e.profile_path, tmp_path_factory.mktemp("compile")
    )


@pytest.fixture(scope="module")
def preview(compiled: list[dict[str, Any]], e2e: E2E) -> dict[str, dict[str, Any]]:
    """The pods as the server should store them (the tenant's MAP applied)."""
    return steps.previewed(compiled, e2e.profile)


@pytest.fixture(scope="module")
def submitted(compiled: list[dict[str, Any]], e2e: E2E) -> dict[str, dict[str, Any]]:
    """The pods as Argo submits them (before the MAP): what the tests create."""
    return steps.previewed(compiled, e2e.profile, mutate=False)


@pytest.fixture(scope="module")
def runs(
    e2e: E2E,
    compiled: list[dict[str, Any]],
    preview: dict[str, dict[str, Any]],
    submitted: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """The three step pods run in the pipeline's order (each reads what the one before wrote),
    once per test process: the tests below only read them, so xdist may spread them."""
    return {step: run_step(e2e, compiled, submitted[step], preview[step], step) for step in POOLS}


def run_step(
    e2e: E2E,
    compiled: list[dict[str, Any]],
    pod: dict[str, Any],
    expected: dict[str, Any],
    step: str,
) -> dict[str, Any]:
    """Create the step's pod as previewed (run-time values filled in), wait for its end."""
    e2e.pool(POOLS[step])
    values = steps.run_values(compiled, pod, step, execution=list(POOLS).index(step) + 1)
    manifest = steps.as_run(pod, values)
    wanted = steps.as_run(expected, values)
    name = manifest["metadata"]["name"]
    started = time.monotonic()
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{e2e.namespace}/pods", manifest, as_user=PIPELINE_RUNNER
    )
    assert status == 201, f"creating {step}'s pod: HTTP {status}: {answer}"
    done = node_pods.wait_for_end(e2e.cluster, e2e.namespace, name, timeout_s=240.0)
    seconds = time.monotonic() - started
    logs = {
        c: _log(e2e, name, c)
        for c in ("init", "kfp-launcher", contract.RUNTIME_INIT_CONTAINER, "wait", "main")
    }
    print(f"\n{step}: pod {done['status']['phase']} in {seconds:.1f} s")
    return {
        "pod": done,
        "logs": logs,
        "seconds": seconds,
        "expected": wanted,
        "node": e2e.node.name,
    }


def _log(e2e: E2E, name: str, container: str) -> str:
    try:
        return node_pods.log(e2e.cluster, e2e.namespace, name, container)
    except AssertionError as error:
        return f"<no log: {error}>"


def _explain(run: dict[str, Any]) -> str:
    states = steps.container_states(run["pod"])
    return json.dumps({"states": states, "logs": run["logs"]}, indent=1)[-6000:]


def _check_record(record: dict[str, Any], pod: dict[str, Any], step: str) -> dict[str, str]:
    annotations = pod["metadata"]["annotations"]
    assert record["expected_spiffe_id"] == annotations[contract.ANNOTATION_SPIFFE_ID]
    pipeline = pod["metadata"]["labels"][contract.LABEL_PIPELINE]
    assert (
        record["expected_spiffe_id"]
        == f"spiffe://acme.example/ns/team-a/pipeline/{pipeline}/step/{step}"
    )
    if IDENTITY_REQUIRED:  # the SVID the agent issued this pod, through the CSI driver's socket
        assert record["spiffe_id"] == record["expected_spiffe_id"], record
    assert record["image_digest"] == annotations[contract.ANNOTATION_IMAGE_DIGEST]
    assert record["exit_code"] == 0, record
    stages = {stage["name"]: stage["status"] for stage in record["stages"]}
    print(f"{step}: audit stages {stages}")
    return stages


def test_prep_runs_to_succeeded(
    e2e: E2E, runs: dict[str, dict[str, Any]], preview: dict[str, Any]
) -> None:
    run = runs["prep"]
    assert run["pod"]["status"]["phase"] == "Succeeded", _explain(run)
    assert run["pod"]["spec"]["nodeName"] == e2e.node.name
    record = steps.audit_record(run["logs"]["main"])
    stages = _check_record(record, preview["prep"], "prep")
    assert stages["run"] == "ok" and stages["config"] == "ok", record["stages"]
    assert stages["identity"] == IDENTITY, record["stages"]
    gpu_stages = ("shim-claim", "preflight", "scrub-before", "shim", "scrub-after")
    assert {stages[name] for name in gpu_stages} == {"skipped"}, record["stages"]  # no GPU
    dataset = steps.run_root(run["pod"]["metadata"]["labels"]["pipeline/runid"])
    key = f"{dataset.removeprefix('minio://')}/prep/dataset"
    assert len(json.loads(e2e.store.objects[key])) == steps.ROWS  # uploaded by the stand-in


@pytest.mark.parametrize("step", ["train", "evaluate"])
def test_gpu_step_runs(runs: dict[str, dict[str, Any]], preview: dict[str, Any], step: str) -> None:
    run = runs[step]
    assert run["pod"]["status"]["phase"] == "Succeeded", _explain(run)
    record = steps.audit_record(run["logs"]["main"])
    stages = _check_record(record, preview[step], step)
    assert stages["identity"] == IDENTITY, record["stages"]
    assert stages["preflight"] == stages["scrub-before"] == stages["scrub-after"] == "ok", stages
    shim = "ok" if step == "evaluate" else "skipped"  # the time-sliced share runs under the shim
    assert stages["shim-claim"] == stages["shim"] == shim, record["stages"]
    assert stages["run"] == "ok", record["stages"]


# What the stored pod has that neither defaulting nor mutation gives it: the scheduler's binding.
BOUND = (".spec.nodeName:",)


@pytest.mark.parametrize("step", list(POOLS))
def test_the_stored_pod_is_the_preview(runs: dict[str, dict[str, Any]], step: str) -> None:
    """The pod the server stored (after defaulting, the ServiceAccount admission, the tenant's
    MutatingAdmissionPolicy with the runtime injection, and the run) against the preview with
    KFP's run-time values filled in: any other difference fails (tests/support/admission.py's
    `differences` lists what the server adds that the preview leaves to it)."""
    run = runs[step]
    found = admission.differences(run["expected"], run["pod"])
    assert [d for d in found if not d.startswith(BOUND)] == [], found
    assert run["pod"]["spec"]["nodeName"] == run["node"]
