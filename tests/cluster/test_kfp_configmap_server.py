"""The guard on KFP's `metadata-grpc-configmap` (secureml.bundle.kfpconfig) on the real API server:
every step imports that ConfigMap into its environment without a prefix, so a tenant who could write
`LD_PRELOAD` into it would load its own library into every step before the launcher runs. With
team-a's bundle in force, a create or an update that adds any key but KFP's two is refused, naming
the rule; what KFP's profile controller writes is admitted, and other ConfigMaps are not judged.
"""

from __future__ import annotations

from typing import Any

import pytest

from secureml.core import contract
from secureml.profile.model import load_profile
from tests.harness.controlplane import ControlPlane
from tests.support.admission import install_tenant, wait_for_policy
from tests.support.paths import REPO

RULE = "secureml.kfpMetadataConfigMap"
KFP_DATA = {
    "METADATA_GRPC_SERVICE_HOST": "metadata-grpc-service.kubeflow",
    "METADATA_GRPC_SERVICE_PORT": "8080",
}
ConfigMap = dict[str, Any]


def _configmap(name: str = contract.KFP_METADATA_CONFIGMAP, **fields: Any) -> ConfigMap:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


@pytest.fixture(scope="module")
def namespace(k8s_cluster: ControlPlane) -> str:
    """team-a's namespace, once the ConfigMap policy is in force (`install_tenant` waits for the
    pod policies only)."""
    profile = load_profile(REPO / "profiles" / "team-a.yaml")
    install_tenant(k8s_cluster, profile)
    name = profile.spec.namespace
    probe = _configmap(data={**KFP_DATA, "LD_PRELOAD": "/tmp/x.so"})
    wait_for_policy(
        lambda: RULE in str(_write(k8s_cluster, "POST", name, probe)[1]), "kfp-metadata-configmap"
    )
    return name


def _write(
    k8s_cluster: ControlPlane, method: str, namespace: str, body: ConfigMap, dry_run: bool = True
) -> tuple[int, Any]:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    if method != "POST":
        path += f"/{body['metadata']['name']}"
    return k8s_cluster.request(method, path + ("?dryRun=All" if dry_run else ""), body)


@pytest.mark.parametrize(
    ("fields", "admitted"),
    [
        ({"data": KFP_DATA}, True),  # what KFP's profile controller writes
        ({}, True),
        ({"data": {**KFP_DATA, "LD_PRELOAD": "/tmp/evil.so"}}, False),
        ({"data": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}, False),
        ({"data": KFP_DATA, "binaryData": {"LD_AUDIT": "eA=="}}, False),
    ],
    ids=["kfp-keys", "empty", "ld-preload", "other-key", "binary-data"],
)
def test_create_is_judged(
    k8s_cluster: ControlPlane, namespace: str, fields: dict[str, Any], admitted: bool
) -> None:
    status, answer = _write(k8s_cluster, "POST", namespace, _configmap(**fields))
    if admitted:
        assert status == 201, answer
    else:
        assert status in (403, 422) and RULE in answer["message"], (status, answer)


def test_an_update_that_adds_a_key_is_refused(k8s_cluster: ControlPlane, namespace: str) -> None:
    status, created = _write(
        k8s_cluster, "POST", namespace, _configmap(data=KFP_DATA), dry_run=False
    )
    assert status == 201, created
    try:
        created["data"]["LD_PRELOAD"] = "/tmp/evil.so"
        status, answer = _write(k8s_cluster, "PUT", namespace, created)
        assert status in (403, 422) and RULE in answer["message"], (status, answer)
        created["data"] = {**KFP_DATA, "METADATA_GRPC_SERVICE_PORT": "8081"}
        status, answer = _write(k8s_cluster, "PUT", namespace, created)
        assert status == 200, answer
    finally:
        k8s_cluster.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{contract.KFP_METADATA_CONFIGMAP}"
        )


def test_other_configmaps_are_not_judged(k8s_cluster: ControlPlane, namespace: str) -> None:
    status, answer = _write(
        k8s_cluster, "POST", namespace, _configmap("notebook-settings", data={"LD_PRELOAD": "x"})
    )
    assert status == 201, answer
