"""The test control plane itself: the version, the admission plugins a platform runs, the CRDs."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from tests.harness.controlplane import ControlPlane


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_server_is_kubernetes_1_36(k8s_cluster: ControlPlane) -> None:
    version = client.VersionApi(k8s_cluster.api_client()).get_code()
    assert (version.major, version.minor) == ("1", "36")
    assert k8s_cluster.kubeconfig.is_file()
    assert k8s_cluster.url.startswith("https://127.0.0.1:")


def test_every_fixture_crd_is_served(k8s_cluster: ControlPlane) -> None:
    status, groups = k8s_cluster.request("GET", "/apis")
    assert status == 200
    served = {group["name"] for group in groups["groups"]}
    assert {
        "spire.spiffe.io",
        "policy.sigstore.dev",
        "kyverno.io",
        "policies.kyverno.io",
        "monitoring.coreos.com",
        "kubeflow.org",
        "trainer.kubeflow.org",
        "jobset.x-k8s.io",
    } <= served


def test_mutating_admission_policy_is_ga_and_mutates(k8s_cluster: ControlPlane) -> None:
    """admissionregistration.k8s.io/v1 MutatingAdmissionPolicy is served without any feature gate
    or runtime-config, and its plugin runs: a labelled ConfigMap gets the patched annotation."""
    namespace, policy = _name("map"), _name("annotate")
    k8s_cluster.create_namespace(namespace)
    base = "/apis/admissionregistration.k8s.io/v1"
    status, answer = k8s_cluster.request(
        "POST",
        f"{base}/mutatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {
                            "expression": 'Object{metadata: Object.metadata{annotations: {"seen": "yes"}}}'
                        },
                    }
                ],
            },
        },
    )
    assert status == 201, answer
    status, answer = k8s_cluster.request(
        "POST",
        f"{base}/mutatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {
                "policyName": policy,
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    assert status == 201, answer
    created = _create_until_mutated(k8s_cluster, namespace)
    assert created["metadata"].get("annotations", {}).get("seen") == "yes"


def _create_until_mutated(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    """The policy's informer sees a new binding within a second or so (more on a loaded machine):
    retry creates for up to 60 s."""
    import time

    deadline = time.monotonic() + 60
    while True:
        status, created = cluster.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "probe-"}},
        )
        assert status == 201, created
        if created["metadata"].get("annotations") or time.monotonic() > deadline:
            return created
        time.sleep(0.2)


def test_create_namespace_makes_the_default_service_account(k8s_cluster: ControlPlane) -> None:
    """No controller manager runs: the helper creates what the ServiceAccount plugin needs."""
    namespace = _name("sa")
    k8s_cluster.create_namespace(namespace, labels={"team": "a"})
    status, account = k8s_cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    )
    assert status == 200, account
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    status, created = k8s_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 201, created
    assert created["spec"]["serviceAccountName"] == "default"


def test_pod_security_admission_runs(k8s_cluster: ControlPlane) -> None:
    namespace = _name("pss")
    k8s_cluster.create_namespace(
        namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"}
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    status, answer = k8s_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert status == 403
    assert "violates PodSecurity" in answer["message"]


def test_log_is_readable(k8s_cluster: ControlPlane) -> None:
    assert k8s_cluster.log_path.is_file()
    assert isinstance(k8s_cluster.log(5), str)
