"""What every renderer shares: supported Kubernetes versions, names, labels, options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from secureml.core import contract
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion
from secureml.core.k8s_versions import K8S_VERSIONS as K8S_VERSIONS  # re-exported for the bundle
from secureml.profile.model import TenantProfile

Manifest = dict[str, Any]

MANAGED_BY = {"app.kubernetes.io/managed-by": "secureml"}


@dataclass(frozen=True)
class KfpEndpoint:
    """A service step pods may reach: pods labelled `pod_labels` in the KFP namespace."""

    name: str
    pod_labels: tuple[tuple[str, str], ...]
    ports: tuple[int, ...]


# Kubeflow Pipelines 2.x in its `kubeflow` namespace: the API server (HTTP 8888, gRPC 8887), the
# metadata gRPC service, and the object store (SeaweedFS in KFP >= 2.15, MinIO before).
DEFAULT_KFP_ENDPOINTS = (
    KfpEndpoint("ml-pipeline", (("app", "ml-pipeline"),), (8887, 8888)),
    KfpEndpoint("metadata-grpc", (("component", "metadata-grpc-server"),), (8080,)),
    KfpEndpoint("seaweedfs", (("app", "seaweedfs"),), (8333,)),
    KfpEndpoint("minio", (("app", "minio"),), (9000,)),
)


@dataclass(frozen=True)
class BundleOptions:
    """How to render: target Kubernetes version, image policy engine, cluster endpoints."""

    k8s_version: K8sVersion = DEFAULT_K8S_VERSION
    image_policy: Literal["policy-controller", "kyverno"] = "policy-controller"
    kubeflow_profile: bool = True
    kfp_namespace: str = "kubeflow"
    kfp_endpoints: tuple[KfpEndpoint, ...] = DEFAULT_KFP_ENDPOINTS
    # The API server's addresses; Argo's executor (the `wait` container) reports results to it.
    api_server_cidrs: tuple[str, ...] = field(default_factory=tuple)


def tenant_labels(profile: TenantProfile) -> dict[str, str]:
    """Labels on every object of the bundle."""
    return {**MANAGED_BY, contract.LABEL_TENANT: profile.metadata.name}


def metadata(profile: TenantProfile, name: str, *, namespaced: bool = True) -> Manifest:
    meta: Manifest = {"name": name, "labels": tenant_labels(profile)}
    if namespaced:
        meta["namespace"] = profile.spec.namespace
    return meta


def cluster_name(profile: TenantProfile, suffix: str) -> str:
    """A cluster-scoped object's name: unique per tenant."""
    return f"secureml-{profile.metadata.name}-{suffix}"


def step_pod_selector(profile: TenantProfile) -> Manifest:
    """Label selector for the tenant's secure steps (the labels the compiler sets)."""
    return {"matchLabels": {contract.LABEL_TENANT: profile.metadata.name}}


def namespace_selector(profile: TenantProfile) -> Manifest:
    return {"matchLabels": {"kubernetes.io/metadata.name": profile.spec.namespace}}


def pod_match_constraints(
    profile: TenantProfile, resources: tuple[str, ...] = ("pods",)
) -> Manifest:
    """An admission policy's `matchConstraints`: pod CREATE/UPDATE in the tenant's namespace."""
    return {
        "namespaceSelector": namespace_selector(profile),
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": list(resources),
            }
        ],
    }
