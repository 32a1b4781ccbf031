"""The rendered ClusterSPIFFEID, run by the real spire-controller-manager, registers each step's ID.

The real API server (k8s_cluster) holds the ClusterSPIFFEID that `secureml.bundle.spiffe` renders,
a node and the step pods; the real controller manager turns them into entries on the real SPIRE
server. The entry's SPIFFE ID must be exactly the ID the compiler expects for the step
(`TenantProfile.spiffe_id`, what the launcher checks), taken from the pod's labels; pods the
ClusterSPIFFEID must not select (no step label, another tenant's label, another namespace) get none.
There is no kubelet, so pods are created bound to the node (`spec.nodeName`) and stay Pending.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.bundle import spiffe, trainer
from secureml.bundle.common import BundleOptions
from secureml.core import contract
from secureml.profile.model import TenantProfile, load_profile
from tests.harness.controlplane import ControlPlane
from tests.harness.spire import Spire, SpireError
from tests.harness.spire_controller_manager import ControllerManager, build_controller_manager
from tests.support.profiles import merge, profile_data
from tests.support.trainer import TRAINER

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SPIFFE_IDS = "/apis/spire.spiffe.io/v1alpha1/clusterspiffeids"


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> TenantProfile:
    """team-a under a tenant and namespace of its own, so no other cluster test's objects (the
    applied team-a bundle's policies, its pods) meet this test's pods."""
    document = yaml.safe_load((ROOT / "profiles" / "team-a.yaml").read_text())
    suffix = uuid.uuid4().hex[:6]
    document["metadata"]["name"] = f"team-spire-{suffix}"
    document["spec"]["namespace"] = f"team-spire-{suffix}"
    path = tmp_path_factory.mktemp("profile") / "profile.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_profile(path)


@pytest.fixture(scope="module")
def controller_manager(k8s_cluster: ControlPlane, spire: Spire) -> Iterator[ControllerManager]:
    try:
        binary = build_controller_manager()
    except SpireError as error:
        pytest.fail(str(error), pytrace=False)
    manager = ControllerManager(binary, spire, k8s_cluster.kubeconfig).start()
    try:
        yield manager
    finally:
        manager.close()


@pytest.fixture
def cluster_spiffe_id(k8s_cluster: ControlPlane, profile: TenantProfile) -> Iterator[Any]:
    """The ClusterSPIFFEID the tenant bundle renders, created in the cluster; deleted after."""
    (manifest,) = spiffe.render(profile, BundleOptions())
    _create(k8s_cluster, CLUSTER_SPIFFE_IDS, dict(manifest))
    yield manifest
    k8s_cluster.request("DELETE", f"{CLUSTER_SPIFFE_IDS}/{manifest['metadata']['name']}")


def _create(cluster: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = cluster.request("POST", path, body)
    assert status == 201, answer
    assert isinstance(answer, dict)
    return answer


def _pod(name: str, labels: dict[str, str], node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.example/step@sha256:" + "0" * 64}],
        },
    }


def test_the_rendered_clusterspiffeid_registers_exactly_the_steps_ids(
    k8s_cluster: ControlPlane, controller_manager: ControllerManager, profile: TenantProfile
) -> None:
    namespace, tenant = profile.spec.namespace, profile.metadata.name
    (cluster_spiffe_id,) = spiffe.render(profile, BundleOptions())
    _create(k8s_cluster, "/apis/spire.spiffe.io/v1alpha1/clusterspiffeids", dict(cluster_spiffe_id))
    k8s_cluster.create_namespace(namespace)
    k8s_cluster.create_namespace(f"{namespace}-other")
    node = _create(
        k8s_cluster,
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": namespace}},
    )

    def labels(step: str | None, tenant_name: str = tenant) -> dict[str, str]:
        out = {
            contract.LABEL_TENANT: tenant_name,
            contract.LABEL_PIPELINE: contract.label_value("fine-tune"),
            contract.LABEL_ISOLATION: "none",
        }
        if step is not None:
            out[contract.LABEL_STEP] = contract.label_value(step)
        return out

    pods = f"/api/v1/namespaces/{namespace}/pods"
    # Pods it must not select first: once the last pod's entry exists, the controller has seen them.
    _create(k8s_cluster, pods, _pod("no-step-label", labels(None), namespace))
    _create(k8s_cluster, pods, _pod("other-tenant", labels("train", "team-b"), namespace))
    _create(
        k8s_cluster,
        f"/api/v1/namespaces/{namespace}-other/pods",
        _pod("other-namespace", labels("train"), namespace),
    )
    evaluate = _create(k8s_cluster, pods, _pod("evaluate", labels("evaluate"), namespace))
    train = _create(k8s_cluster, pods, _pod("train", labels("train"), namespace))

    expected = {
        profile.spiffe_id("fine-tune", "evaluate"): evaluate["metadata"]["uid"],
        profile.spiffe_id("fine-tune", "train"): train["metadata"]["uid"],
    }
    for spiffe_id in expected:
        controller_manager.wait_for_entry(spiffe_id)
    parent = controller_manager.parent_id(node["metadata"]["uid"])
    entries = {
        _id(entry["spiffe_id"]): entry
        for entry in controller_manager.spire.list_entries()
        if _id(entry["parent_id"]) == parent
    }
    assert set(entries) == set(expected), entries
    for spiffe_id, pod_uid in expected.items():
        selectors = {(s["type"], s["value"]) for s in entries[spiffe_id]["selectors"]}
        assert selectors == {("k8s", f"pod-uid:{pod_uid}")}  # that pod, on that node's agent


def _id(value: dict[str, str]) -> str:
    return f"spiffe://{value['trust_domain']}{value['path']}"


# --- issue 18: the trainer nodes' ClusterSPIFFEID (bundle/trainer.py) ---------------------------
# Each node pod of a TrainJob is registered as `<step's ID>/node/<completion index>`, the step's own
# pod as the step's ID, and the steps' entry does not also register the nodes.


def _trainer_profile() -> TenantProfile:
    name = f"team-nodes-{uuid.uuid4().hex[:6]}"
    data = profile_data("team-a")
    data["metadata"]["name"] = name
    data["spec"] = merge(data["spec"], {"namespace": name, "trainer": TRAINER})
    return TenantProfile.from_dict(data, source="test:trainer-spiffe")


def test_each_node_is_registered_under_the_steps_id(
    k8s_cluster: ControlPlane, controller_manager: ControllerManager
) -> None:
    profile = _trainer_profile()
    namespace, tenant = profile.spec.namespace, profile.metadata.name
    options = BundleOptions()
    for entry in [*spiffe.render(profile, options), *trainer.render_spiffe(profile, options)]:
        _create(k8s_cluster, CLUSTER_SPIFFE_IDS, dict(entry))
    k8s_cluster.create_namespace(namespace)
    node = _create(
        k8s_cluster,
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": namespace}},
    )
    step = {
        contract.LABEL_TENANT: tenant,
        contract.LABEL_PIPELINE: "fine-tune",
        contract.LABEL_STEP: "train",
        contract.LABEL_ISOLATION: "none",
    }
    pods = f"/api/v1/namespaces/{namespace}/pods"
    created: dict[str, Any] = {
        "submitter": _create(k8s_cluster, pods, _pod("submitter", step, namespace))
    }
    for index in (0, 1):
        labels = {
            **step,
            contract.LABEL_ISOLATION: "dedicated",
            contract.LABEL_TRAINER_NODE: "true",
            contract.LABEL_JOB_COMPLETION_INDEX: str(index),
        }
        created[f"node-{index}"] = _create(
            k8s_cluster, pods, _pod(f"node-{index}", labels, namespace)
        )
    step_id = profile.spiffe_id("fine-tune", "train")
    expected = {
        step_id: created["submitter"]["metadata"]["uid"],
        f"{step_id}/node/0": created["node-0"]["metadata"]["uid"],
        f"{step_id}/node/1": created["node-1"]["metadata"]["uid"],
    }
    for spiffe_id in expected:
        controller_manager.wait_for_entry(spiffe_id)
    parent = controller_manager.parent_id(node["metadata"]["uid"])
    entries = [e for e in controller_manager.spire.list_entries() if _id(e["parent_id"]) == parent]
    assert sorted(_id(e["spiffe_id"]) for e in entries) == sorted(expected)  # one entry per pod
    for entry in entries:
        selectors = {(s["type"], s["value"]) for s in entry["selectors"]}
        assert selectors == {("k8s", f"pod-uid:{expected[_id(entry['spiffe_id'])]}")}
