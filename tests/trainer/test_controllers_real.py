"""The real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers (tests/harness/trainer_controllers.py)
on a control plane of this module's own (their webhooks judge every TrainJob and JobSet pod of the
server they run on): what they make of a TrainJob, without a node (the pods stay Pending). The
TrainJob running on a node under a tenant's bundle is tests/e2e/test_trainjob_run.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane, HarnessError
from tests.harness.trainer_controllers import RUNTIME_RESTART_POLICY, TrainerControllers

pytestmark = [pytest.mark.cluster]

NAMESPACE = "trainer-real"
TRAINJOBS = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NAMESPACE}/trainjobs"


@pytest.fixture(scope="module")
def controllers(
    own_k8s_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainerControllers]:
    folder: Path = tmp_path_factory.mktemp("trainer-controllers")
    try:
        running = TrainerControllers(own_k8s_cluster, folder)
        running.start()
    except HarnessError as error:
        pytest.fail(f"Trainer and JobSet did not start: {error}", pytrace=False)
    own_k8s_cluster.create_namespace(NAMESPACE)
    yield running
    running.stop()


def _trainjob(name: str, runtime: str = "torch-distributed") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"image": "example.test/train:1", "command": ["true"], "numNodes": 2},
        },
    }


def _pods(cluster: ControlPlane, job: str, count: int, timeout_s: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    found: list[Any] = []
    while time.monotonic() < deadline:
        _, answer = cluster.request(
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=jobset.sigs.k8s.io/jobset-name={job}",
        )
        found = answer.get("items", [])
        if len(found) >= count:
            return sorted(
                found,
                key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
            )
        time.sleep(0.2)
    raise AssertionError(f"{len(found)} pods of {job} after {timeout_s} s")


def test_trainers_own_webhook_refuses_a_missing_runtime(
    controllers: TrainerControllers, own_k8s_cluster: ControlPlane
) -> None:
    status, answer = own_k8s_cluster.request("POST", TRAINJOBS, _trainjob("nope", "absent"))
    assert status == 403, answer
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied' in answer["message"]


def test_a_trainjob_becomes_a_jobset_and_two_node_pods(
    controllers: TrainerControllers, own_k8s_cluster: ControlPlane
) -> None:
    """What the pod rules judge on a cluster: the node pods as JobSet and the Job controller
    create them from Trainer's runtime (as the harness installs it) and the TrainJob."""
    status, answer = own_k8s_cluster.request("POST", TRAINJOBS, _trainjob("two"))
    assert status == 201, answer
    pods = _pods(own_k8s_cluster, "two", 2)
    for index, pod in enumerate(pods):
        assert pod["spec"]["restartPolicy"] == RUNTIME_RESTART_POLICY
        assert pod["spec"]["hostname"] == f"two-node-0-{index}"
        assert pod["spec"]["subdomain"] == "two"
        node = pod["spec"]["containers"][0]
        assert node["name"] == "node" and node["image"] == "example.test/train:1"
        env = {e["name"]: e.get("value") for e in node["env"]}
        assert env["PET_MASTER_ADDR"] == "two-node-0-0.two"
        assert env["PET_MASTER_PORT"] == "29500"
        assert env["PET_NNODES"] == "2"
    _, service = own_k8s_cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/services/two")
    assert service["spec"]["clusterIP"] == "None", service  # headless: the pods' DNS names


def test_deleting_the_trainjob_deletes_its_pods(
    controllers: TrainerControllers, own_k8s_cluster: ControlPlane
) -> None:
    status, answer = own_k8s_cluster.request("POST", TRAINJOBS, _trainjob("gone"))
    assert status == 201, answer
    _pods(own_k8s_cluster, "gone", 2)
    status, answer = own_k8s_cluster.request(
        "DELETE", f"{TRAINJOBS}/gone?propagationPolicy=Background"
    )
    assert status == 200, answer
    deadline = time.monotonic() + 60
    left: list[Any] = ["?"]
    while left and time.monotonic() < deadline:
        _, found = own_k8s_cluster.request(
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=jobset.sigs.k8s.io/jobset-name=gone",
        )
        left = found.get("items", [])
        time.sleep(0.3)
    assert left == [], [p["metadata"]["name"] for p in left]
