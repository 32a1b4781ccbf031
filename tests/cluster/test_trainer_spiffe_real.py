"""The trainer nodes' ClusterSPIFFEID, run by the real spire-controller-manager (issue 18): each
node pod of a TrainJob is registered as `<step's ID>/node/<completion index>`, the step's own pod
as the step's ID, and the steps' entry does not also register the nodes. As in
test_clusterspiffeid_real.py: a real API server and SPIRE, pods bound to a node, no kubelet."""

import uuid
from typing import Any

from harness.controlplane import ControlPlane
from harness.spire_controller_manager import ControllerManager

from secureml import contract
from secureml.bundle import spiffe, trainer
from secureml.bundle.common import BundleOptions
from secureml.profile import TenantProfile
from tests.cluster import test_clusterspiffeid_real as real
from tests.cluster.test_clusterspiffeid_real import CLUSTER_SPIFFE_IDS, _create, _id, _pod
from tests.compiler.compilerhelp import merge, profile_data
from tests.trainer.trainerhelp import TRAINER

controller_manager = real.controller_manager  # the module's fixture: SPIRE's controller manager


def _profile() -> TenantProfile:
    name = f"team-nodes-{uuid.uuid4().hex[:6]}"
    data = profile_data("team-a")
    data["metadata"]["name"] = name
    data["spec"] = merge(data["spec"], {"namespace": name, "trainer": TRAINER})
    return TenantProfile.from_dict(data, source="test:trainer-spiffe")


def test_each_node_is_registered_under_the_steps_id(
    k8s_cluster: ControlPlane, controller_manager: ControllerManager
) -> None:
    profile = _profile()
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
