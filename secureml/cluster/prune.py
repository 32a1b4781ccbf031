"""Objects of a tenant's bundle on the cluster that its current render no longer has."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from secureml.bundle.common import MANAGED_BY
from secureml.cluster.connection import Cluster, ServerRefusedError
from secureml.cluster.refusal import object_ref
from secureml.core import contract

# Every kind a bundle can hold (tests/cluster checks the example profiles' renders against it),
# a Namespace left out on purpose.
BUNDLE_KINDS: tuple[tuple[str, str], ...] = (
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicyBinding"),
    ("apps/v1", "DaemonSet"),
    ("kubeflow.org/v1", "Profile"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("policies.kyverno.io/v1", "ImageValidatingPolicy"),
    ("policy.sigstore.dev/v1beta1", "ClusterImagePolicy"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("spire.spiffe.io/v1alpha1", "ClusterSPIFFEID"),
    ("v1", "ConfigMap"),
    ("v1", "ResourceQuota"),
    ("v1", "ServiceAccount"),
)


def stale_objects(
    cluster: Cluster, tenant: str, rendered: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The tenant's bundle objects on the cluster that `rendered` does not hold (kinds the
    cluster does not serve are skipped: nothing of them can be there)."""
    wanted = {object_ref(obj) for obj in rendered}
    labels = {**MANAGED_BY, contract.LABEL_TENANT: tenant}
    selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
    stale: list[dict[str, Any]] = []
    for api_version, kind in BUNDLE_KINDS:
        resource = (cluster.served(api_version) or {}).get(kind)
        if resource is None:
            continue
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        listing = cluster.request(
            "GET", f"{base}/{resource.name}", query={"labelSelector": selector}
        ).body
        for item in listing.get("items") or []:
            obj = {"apiVersion": api_version, "kind": kind, "metadata": item["metadata"]}
            if object_ref(obj) not in wanted:
                stale.append(obj)
    return stale


def delete_objects(cluster: Cluster, objects: Iterable[Mapping[str, Any]]) -> None:
    """Delete each object; one already gone is not an error."""
    for obj in objects:
        meta = obj["metadata"]
        kind, api_version = obj["kind"], obj["apiVersion"]
        resource = (cluster.served(api_version) or {})[kind]
        path = cluster.object_path(api_version, resource, meta.get("namespace"))
        try:
            cluster.request("DELETE", f"{path}/{meta['name']}")
        except ServerRefusedError as refusal:
            if refusal.code != 404:
                raise cluster.unusable(f"DELETE {object_ref(obj)}", refusal) from None
