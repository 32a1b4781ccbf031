"""Tenant bundles on the session's test control plane: what the cluster tests share.

No policy-controller runs beside the test API server, so the conversion webhook its real CRD
names (`cosign-system/webhook`) is unreachable and every write of a `policy.sigstore.dev/v1beta1`
object fails with 500 (`secureml profile apply` names the component for that). The tests that
apply bundles switch that CRD's conversion to `None` once, which is what the running
controller's webhook does for these two versions' shared fields, and keeps the CRD otherwise real.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from harness.controlplane import ControlPlane

from secureml.cluster.connection import Cluster, ServerRefusedError, connect

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "profiles").glob("*.yaml"))
POLICY_CONTROLLER_CRD = "clusterimagepolicies.policy.sigstore.dev"


def admin(k8s_cluster: ControlPlane) -> Cluster:
    """A secureml.cluster connection through the fixture's kubeconfig, with the policy-controller
    CRD served without its (absent) conversion webhook."""
    cluster = connect(k8s_cluster.kubeconfig)
    cluster.request(
        "PATCH",
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{POLICY_CONTROLLER_CRD}",
        body={"spec": {"conversion": {"strategy": "None", "webhook": None}}},
        content_type="application/merge-patch+json",
    )
    return cluster


def fresh_profile(folder: Path, base: str = "team-a") -> tuple[Path, str]:
    """A copy of an example profile under a tenant name (and namespace) no other test uses."""
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    document = yaml.safe_load((REPO / "profiles" / f"{base}.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["namespace"] = name
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, name


def stored(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object as the server stores it, or None when it does not exist."""
    resource = (cluster.served(obj["apiVersion"]) or {})[obj["kind"]]
    meta = obj["metadata"]
    path = cluster.object_path(obj["apiVersion"], resource, meta.get("namespace"))
    try:
        return cluster.get(f"{path}/{meta['name']}")
    except ServerRefusedError as refusal:
        if refusal.code == 404:
            return None
        raise
