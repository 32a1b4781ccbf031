"""Tenant bundles on the session's test control plane: what the cluster tests share.

The harness installs the policy-controller CRD with conversion strategy None (no policy-controller
runs to serve its conversion webhook; tests/harness/controlplane.py), so bundles apply as rendered.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from secureml.cluster.connection import Cluster, ServerRefusedError, connect
from tests.harness.controlplane import ControlPlane
from tests.support.paths import REPO

PROFILES = sorted((REPO / "profiles").glob("*.yaml"))


def admin(k8s_cluster: ControlPlane) -> Cluster:
    """A secureml.cluster connection through the fixture's kubeconfig (the cluster admin)."""
    return connect(k8s_cluster.kubeconfig)


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
