"""The opt-in doctor DaemonSet (`spec.monitoring.doctor`): only where a profile asks, in the
platform namespace, hardened but for its read-only host paths, carrying the profile it checks."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from secureml.bundle import BundleOptions
from secureml.bundle.doctor import HOST_PATHS, node_terms
from secureml.core.errors import ProfileError
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_level
from tests.bundle.conftest import load, rendered


def _doctor_objects(name: str) -> dict[str, dict[str, Any]]:
    objects = rendered(name, BundleOptions())
    return {
        o["kind"]: o
        for o in objects
        if o["metadata"].get("namespace") == "secureml-system"
        or "doctor" in o["metadata"]["name"]
        or o["metadata"]["name"] == "secureml-system"
    }


def test_only_a_profile_that_opts_in_gets_one() -> None:
    assert set(_doctor_objects("team-restricted")) == {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
    }
    assert _doctor_objects("team-a") == {}


def test_the_pod_is_hardened_and_its_host_paths_read_only() -> None:
    objects = _doctor_objects("team-restricted")
    daemonset = objects["DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert (
        security["capabilities"] == {"drop": ["ALL"]} and not security["allowPrivilegeEscalation"]
    )
    assert "resources" in container and not any(
        k.startswith("nvidia.com/") for k in container["resources"]["limits"]
    )
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {name: source for name, source, _, _ in HOST_PATHS}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all(mounts[name]["readOnly"] for name in host)
    # Judged as a pod: Pod Security restricted refuses it for the host paths, and for nothing else.
    as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "doctor"}, "spec": pod}
    reasons = {v.rule for v in evaluate(as_pod, rules_for_level("restricted"))}
    assert reasons and reasons <= {"pss.hostPathVolumes", "pss.restrictedVolumes"}, reasons
    namespace = objects["Namespace"]["metadata"]
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert "secureml.dev/tenant" not in namespace["labels"]  # shared by every tenant's doctor


def test_it_runs_on_the_pools_nodes_and_reads_only_nodes() -> None:
    objects = _doctor_objects("team-restricted")
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "secureml.dev/pool", "operator": "In", "values": ["restricted-h100"]}
            ]
        }
    ]
    assert pod["tolerations"][0]["value"] == "team-restricted"
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    command = pod["containers"][0]["command"]
    assert command[:5] == ["python3", "-m", "secureml", "doctor", "node"]
    assert "--node-name" in command and "--interval" in command
    mig_terms = node_terms(load("team-conf"))
    assert mig_terms[0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert "NVIDIA-H200" in mig_terms[0]["matchExpressions"][0]["values"]


def test_the_configmap_holds_the_profile_it_checks() -> None:
    data = _doctor_objects("team-restricted")["ConfigMap"]["data"]["profile.yaml"]
    assert TenantProfile.from_dict(yaml.safe_load(data)) == load("team-restricted")


def test_the_tenants_namespace_and_an_unpinned_image_are_refused() -> None:
    data = yaml.safe_load((load.__globals__["ROOT"] / "profiles/team-restricted.yaml").read_text())
    data["spec"]["monitoring"]["doctor"]["namespace"] = "team-restricted"
    with pytest.raises(ProfileError) as caught:
        TenantProfile.from_dict(data)
    assert [p for p, _ in caught.value.problems] == ["spec.monitoring.doctor.namespace"]
    data["spec"]["monitoring"]["doctor"] = {"image": "registry.acme.example/doctor:latest"}
    with pytest.raises(ProfileError) as caught:
        TenantProfile.from_dict(data)
    assert "sha256" in caught.value.problems[0][1]
