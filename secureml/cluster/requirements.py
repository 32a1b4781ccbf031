"""What a cluster must serve before a bundle can be applied, and what to say when it does not."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from secureml.cluster.connection import Resource
from secureml.core.errors import ClusterError

MAP_GROUP = "admissionregistration.k8s.io"
MAP_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
MAP_BETA_FLAGS = (
    "--feature-gates=MutatingAdmissionPolicy=true",
    "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
)


@dataclass(frozen=True)
class Component:
    """The component that installs an API group's CRDs."""

    name: str
    install: str
    without: str


COMPONENTS: dict[str, Component] = {
    "spire.spiffe.io": Component(
        "SPIRE's spire-controller-manager",
        "install SPIRE with its controller manager (the spire-crds Helm chart has the "
        "ClusterSPIFFEID CRD)",
        "or set spec.identity.required: false in the profile (no per-step SPIFFE identity)",
    ),
    "policy.sigstore.dev": Component(
        "Sigstore policy-controller",
        "install the policy-controller (Helm chart sigstore/policy-controller)",
        "or render for Kyverno with --image-policy kyverno",
    ),
    "kyverno.io": Component(
        "Kyverno",
        "install Kyverno 1.15 or newer (Helm chart kyverno/kyverno)",
        "or render for Sigstore's policy-controller with --image-policy policy-controller",
    ),
    "policies.kyverno.io": Component(
        "Kyverno",
        "install Kyverno 1.15 or newer (Helm chart kyverno/kyverno)",
        "or render for Sigstore's policy-controller with --image-policy policy-controller",
    ),
    "monitoring.coreos.com": Component(
        "Prometheus Operator",
        "install the Prometheus Operator (e.g. kube-prometheus-stack)",
        "or set spec.monitoring.alerts: false in the profile",
    ),
    "kubeflow.org": Component(
        "Kubeflow (its profile controller's Profile CRD)",
        "install Kubeflow's central dashboard profile controller",
        "or render a plain ResourceQuota with --no-kubeflow-profile",
    ),
}


@dataclass(frozen=True)
class Missing:
    """One kind of the bundle that the server does not serve."""

    api_version: str
    kind: str
    names: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.kind} ({self.api_version}: {', '.join(self.names)})"


Served = Callable[[str], "dict[str, Resource] | None"]


def missing_kinds(manifests: Iterable[dict[str, Any]], served: Served) -> list[Missing]:
    """The kinds of `manifests` that `served(api_version)` does not list, in bundle order."""
    names: dict[tuple[str, str], list[str]] = {}
    for obj in manifests:
        key = (obj["apiVersion"], obj["kind"])
        names.setdefault(key, []).append(obj.get("metadata", {}).get("name", "?"))
    missing = []
    for (api_version, kind), objects in names.items():
        resources = served(api_version)
        if resources is None or kind not in resources:
            missing.append(Missing(api_version, kind, tuple(objects)))
    return missing


def requirement_error(missing: list[Missing], served: Served, server_version: str) -> ClusterError:
    """One error for every missing kind: the MAP flags, the component of each custom resource."""
    problems: list[str] = []
    fixes: list[str] = []
    map_missing = [
        m for m in missing if api_group(m.api_version) == MAP_GROUP and m.kind in MAP_KINDS
    ]
    if map_missing:
        version = map_missing[0].api_version.split("/")[1]
        problems.append(
            f"MutatingAdmissionPolicy is not served at {MAP_GROUP}/{version} "
            f"(server {server_version})"
        )
        fixes.append(_map_fix(version, served, server_version))
    components: dict[str, list[Missing]] = {}
    others: list[Missing] = []
    for item in missing:
        if item in map_missing:
            continue
        component = COMPONENTS.get(api_group(item.api_version))
        if component is None:
            others.append(item)
        else:
            components.setdefault(component.name, []).append(item)
    for name, items in components.items():
        component = COMPONENTS[api_group(items[0].api_version)]
        kinds = "; ".join(item.describe() for item in items)
        problems.append(f"{name} is not installed: the server does not serve {kinds}")
        fixes.append(f"{component.install}, {component.without}")
    for item in others:
        problems.append(f"the server does not serve {item.describe()}")
        fixes.append(
            f"enable {item.api_version} on the API server, or render the bundle with "
            f"--k8s-version matching the server ({server_version})"
        )
    return ClusterError(
        "the cluster lacks what the bundle needs; nothing was applied",
        why="\n       ".join(problems),
        fix="\n       ".join(fixes),
    )


def _map_fix(version: str, served: Served, server_version: str) -> str:
    beta = (served(f"{MAP_GROUP}/v1beta1") or {}).keys() >= set(MAP_KINDS)
    ga = (served(f"{MAP_GROUP}/v1") or {}).keys() >= set(MAP_KINDS)
    if version == "v1beta1":
        if ga:
            return (
                f"the server serves the GA API ({MAP_GROUP}/v1): render for its version "
                f"(--k8s-version {server_minor(server_version) or '1.36'})"
            )
        return (
            "Kubernetes 1.34 and 1.35 serve the MutatingAdmissionPolicy beta only when "
            f"kube-apiserver runs with {' and '.join(MAP_BETA_FLAGS)} (the "
            "MutatingAdmissionPolicy admission plugin is then on by default); without it no "
            "SPIFFE socket, preload or read-only root is injected and every step is denied"
        )
    if beta:
        return (
            f"the server serves only the beta API ({MAP_GROUP}/v1beta1): render with "
            f"--k8s-version {server_minor(server_version) or '1.35'}"
        )
    return (
        f"{MAP_GROUP}/v1 MutatingAdmissionPolicy is served from Kubernetes 1.36; on 1.34/1.35 "
        f"render with --k8s-version 1.34 or 1.35 and start kube-apiserver with "
        f"{' and '.join(MAP_BETA_FLAGS)}"
    )


def api_group(api_version: str) -> str:
    """The API group of `api_version` ("" for the core group)."""
    return api_version.split("/")[0] if "/" in api_version else ""


def server_minor(git_version: str) -> str:
    """'v1.35.2' -> '1.35' ('' when the version does not parse)."""
    parts = git_version.lstrip("v").split(".")
    if len(parts) >= 2 and parts[0].isdigit():
        minor = "".join(ch for ch in parts[1] if ch.isdigit())
        return f"{parts[0]}.{minor}" if minor else ""
    return ""
