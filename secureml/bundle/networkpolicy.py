"""NetworkPolicies for the tenant's namespace: deny everything, then allow what a step needs."""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata, step_pod_selector
from secureml.profile.model import TenantProfile

EVERY_POD: Manifest = {}


def _policy(
    profile: TenantProfile, name: str, spec: Manifest, pods: Manifest = EVERY_POD
) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(profile, name),
        "spec": {"podSelector": dict(pods), **spec},
    }


def _tcp(ports: list[int] | tuple[int, ...]) -> list[Manifest]:
    return [{"port": port, "protocol": "TCP"} for port in sorted(set(ports))]


def _default_deny(profile: TenantProfile) -> Manifest:
    return _policy(profile, "secureml-default-deny", {"policyTypes": ["Ingress", "Egress"]})


def _allow_dns(profile: TenantProfile) -> Manifest:
    """The cluster DNS (kube-dns in kube-system), UDP and TCP 53."""
    kube_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    ports = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    egress = [{"to": [kube_dns], "ports": ports}]
    return _policy(profile, "secureml-allow-dns", {"policyTypes": ["Egress"], "egress": egress})


def _allow_kfp(profile: TenantProfile, options: BundleOptions) -> Manifest:
    """KFP's endpoints (API, metadata service, object store) in the KFP namespace, by pod labels."""
    kfp_namespace = {"matchLabels": {"kubernetes.io/metadata.name": options.kfp_namespace}}
    egress = [
        {
            "to": [
                {
                    "namespaceSelector": kfp_namespace,
                    "podSelector": {"matchLabels": dict(endpoint.pod_labels)},
                }
            ],
            "ports": _tcp(endpoint.ports),
        }
        for endpoint in sorted(options.kfp_endpoints, key=lambda e: e.name)
    ]
    return _policy(profile, "secureml-allow-kfp", {"policyTypes": ["Egress"], "egress": egress})


def _allow_api_server(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    """The API server's addresses, when given (Argo's executor reports results to it)."""
    if not options.api_server_cidrs:
        return []
    blocks = [{"ipBlock": {"cidr": cidr}} for cidr in sorted(options.api_server_cidrs)]
    egress = [{"to": blocks, "ports": _tcp((443, 6443))}]
    spec = {"policyTypes": ["Egress"], "egress": egress}
    return [_policy(profile, "secureml-allow-apiserver", spec)]


def _allow_profile_egress(profile: TenantProfile) -> list[Manifest]:
    """The profile's egress allowlist, for the secure steps only."""
    egress = profile.spec.network.egress
    if not egress:
        return []
    rules = []
    for rule in egress:
        entry: Manifest = {"to": [{"ipBlock": {"cidr": rule.cidr}}]}
        if rule.ports:
            entry["ports"] = _tcp(rule.ports)
        rules.append(entry)
    spec = {"policyTypes": ["Egress"], "egress": rules}
    return [_policy(profile, "secureml-allow-egress", spec, pods=step_pod_selector(profile))]


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        _default_deny(profile),
        _allow_dns(profile),
        _allow_kfp(profile, options),
        *_allow_api_server(profile, options),
        *_allow_profile_egress(profile),
    ]
