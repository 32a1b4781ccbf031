"""NetworkPolicies for the tenant's namespace: deny everything, then allow what a step needs.

Policies add up. The default deny and the platform allowances (DNS, the KFP API, metadata service
and object store in the KFP namespace, the API server when its addresses are given) select every
pod in the namespace: KFP's own driver pods run there without secureml labels and need exactly
these. The profile's egress allowlist selects only the secure steps, by the tenant label the
compiler sets. No ingress at all.
"""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata, step_pod_selector
from secureml.profile import TenantProfile

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


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    kfp_namespace = {"matchLabels": {"kubernetes.io/metadata.name": options.kfp_namespace}}
    policies = [
        _policy(profile, "secureml-default-deny", {"policyTypes": ["Ingress", "Egress"]}),
        _policy(
            profile,
            "secureml-allow-dns",
            {
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                                },
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                        "ports": [
                            {"port": 53, "protocol": "UDP"},
                            {"port": 53, "protocol": "TCP"},
                        ],
                    }
                ],
            },
        ),
        _policy(
            profile,
            "secureml-allow-kfp",
            {
                "policyTypes": ["Egress"],
                "egress": [
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
                ],
            },
        ),
    ]
    if options.api_server_cidrs:
        policies.append(
            _policy(
                profile,
                "secureml-allow-apiserver",
                {
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {"ipBlock": {"cidr": cidr}}
                                for cidr in sorted(options.api_server_cidrs)
                            ],
                            "ports": _tcp((443, 6443)),
                        }
                    ],
                },
            )
        )
    egress = profile.spec.network.egress
    if egress:
        rules = []
        for rule in egress:
            entry: Manifest = {"to": [{"ipBlock": {"cidr": rule.cidr}}]}
            if rule.ports:
                entry["ports"] = _tcp(rule.ports)
            rules.append(entry)
        policies.append(
            _policy(
                profile,
                "secureml-allow-egress",
                {"policyTypes": ["Egress"], "egress": rules},
                pods=step_pod_selector(profile),
            )
        )
    return policies
