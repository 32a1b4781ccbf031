"""`secureml doctor cluster` against the session's real kube-apiserver (tests/harness).

A freshly applied bundle is in sync; a hand edit (a binding switched to Warn, a typo in a policy
expression that the server's type checking catches) is reported as drift with the diff, the field
manager that made it and the apply to undo it; a namespace without its Pod Security labels, the
absence of SPIRE, the SPIFFE CSI driver and the device plugin are findings with their fix; the
same components, created by hand (no controllers, no kubelet here: the objects and their status
are written directly), pass. Every tenant, namespace and node here has a name of its own, and the
cluster-wide objects made for the component test are deleted again.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secureml.bundle import BundleOptions, render_objects
from secureml.cli import app
from secureml.cluster import BundleRefusedError, apply_bundle
from secureml.profile.model import load_profile
from tests.harness.controlplane import ControlPlane
from tests.support.cluster_bundles import admin, fresh_profile
from tests.support.json_schemas import check

TENANT_CHECKS = ("bundle", "pod-security", "bindings", "type-checking")


def doctor(k8s_cluster: ControlPlane, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(
        app,
        [
            "doctor",
            "cluster",
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            *args,
            "--format",
            "json",
        ],
    )
    assert "Traceback" not in result.output, result.output
    document = json.loads(result.stdout)
    check("doctor-cluster", document)
    return result.exit_code, document


def checks_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in document["checks"]}


def applied(k8s_cluster: ControlPlane, folder: Path, type_checked: bool = True) -> tuple[Path, str]:
    """A fresh tenant's bundle applied (and, if `type_checked`, each policy type-checked by
    kube-controller-manager, clean)."""
    path, tenant = fresh_profile(folder)
    objects = render_objects(load_profile(path), BundleOptions())
    wait = 60 if type_checked else 0
    result = apply_bundle(objects, cluster=admin(k8s_cluster), typecheck_timeout_s=wait)
    assert not result.warnings, result.warnings
    return path, tenant


def patch(k8s_cluster: ControlPlane, path: str, body: dict[str, Any]) -> None:
    """A hand edit, as `kubectl edit` makes it (merge patch, its own field manager)."""
    cluster = admin(k8s_cluster)
    cluster.request(
        "PATCH",
        path,
        query={"fieldManager": "kubectl-edit"},
        body=body,
        content_type="application/merge-patch+json",
    )


def test_an_applied_bundle_is_in_sync_and_a_hand_edit_is_drift(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    profile, tenant = applied(k8s_cluster, tmp_path)
    objects = render_objects(load_profile(profile), BundleOptions())
    code, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    for name in TENANT_CHECKS:
        assert checks[f"tenant.{tenant}.{name}"]["status"] == "pass", checks[
            f"tenant.{tenant}.{name}"
        ]
    assert checks[f"tenant.{tenant}.bundle"]["seen"].endswith("objects stored as rendered")
    assert checks["cluster.version"]["status"] == "pass"
    assert document["renderedFor"] == "1.36"
    # The harness runs no SPIRE and no device plugin: the cluster is not ready, exit 1.
    assert code == 1 and checks["spire.server"]["status"] == "fail"

    binding = f"secureml-{tenant}-validate-pods"
    binding_path = (
        f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{binding}"
    )
    patch(k8s_cluster, binding_path, {"spec": {"validationActions": ["Warn"]}})
    code, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    drift = checks[f"tenant.{tenant}.bundle"]
    assert code == 1 and drift["status"] == "fail"
    ref = f"ValidatingAdmissionPolicyBinding/{binding}"
    assert "differs from the render (1 of " in drift["seen"]
    assert f"{ref} (also written by kubectl-edit)" in drift["seen"]
    assert f"--- rendered/{tenant}/{ref}\n+++ cluster/{tenant}/{ref}\n" in drift["seen"]
    assert "\n-  - Deny\n+  - Warn" in drift["seen"]
    assert drift["fix"].startswith(
        f"apply the profile again: secureml profile apply {profile} --force-conflicts"
    )
    bindings = checks[f"tenant.{tenant}.bindings"]
    assert bindings["status"] == "fail"
    assert f"{ref} validationActions ['Warn']: a violation is not denied" in bindings["seen"]

    # A forced apply cannot take the binding back: server-side apply keeps the Warn item (its
    # list is a set, merged per item), and the server refuses Warn with Deny. The fix says so.
    assert (
        "kubectl replace -f DIR/" + tenant + "/validatingadmissionpolicybinding.yaml"
        in (drift["fix"])
    )
    with pytest.raises(BundleRefusedError, match="must not contain both Deny and Warn"):
        apply_bundle(objects, cluster=admin(k8s_cluster), force_conflicts=True)
    # Replacing it with the rendered object (what kubectl replace sends) brings it back in sync.
    (rendered,) = [
        o for o in objects if o["metadata"]["name"] == binding and "Binding" in o["kind"]
    ]
    stored = admin(k8s_cluster).get(binding_path)
    rendered = {
        **rendered,
        "metadata": {
            **rendered["metadata"],
            "resourceVersion": stored["metadata"]["resourceVersion"],
        },
    }
    status, answer = k8s_cluster.request("PUT", binding_path, rendered)
    assert status == 200, answer
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    assert checks_of(document)[f"tenant.{tenant}.bundle"]["status"] == "pass"
    assert checks_of(document)[f"tenant.{tenant}.bindings"]["status"] == "pass"


def test_a_hand_edited_expression_is_drift_and_a_type_checking_warning(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    profile, tenant = applied(k8s_cluster, tmp_path, type_checked=False)
    name = f"secureml-{tenant}-validate-pods"
    path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"
    stored = admin(k8s_cluster).get(path)
    validations = stored["spec"]["validations"]
    validations[0]["expression"] = "object.spec.hostPIDs == false"
    patch(k8s_cluster, path, {"spec": {"validations": validations}})
    deadline = time.monotonic() + 60
    while True:  # kube-controller-manager type-checks the new generation a moment later
        _, document = doctor(k8s_cluster, "--profiles", str(profile))
        typing = checks_of(document)[f"tenant.{tenant}.type-checking"]
        if typing["status"] != "warn" or "not type-checked yet" not in typing["seen"]:
            break
        assert time.monotonic() < deadline, typing
        time.sleep(0.25)
    assert typing["status"] == "warn", typing
    rule = validations[0]["message"].split(": ", 1)[0]
    assert typing["seen"].startswith(
        f"ValidatingAdmissionPolicy/{name}: spec.validations[0].expression ({rule}): "
    )
    assert "hostPIDs" in typing["seen"]
    assert "--k8s-version" in typing["fix"]
    drift = checks_of(document)[f"tenant.{tenant}.bundle"]
    assert drift["status"] == "fail"
    assert "\n+  - expression: object.spec.hostPIDs == false\n" in drift["seen"]


def test_a_namespace_without_its_pod_security_labels(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    profile, tenant = fresh_profile(tmp_path)
    k8s_cluster.create_namespace(tenant)  # by hand: no bundle, no labels
    code, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    psa = checks[f"tenant.{tenant}.pod-security"]
    assert code == 1 and psa["status"] == "fail"
    assert (
        "pod-security.kubernetes.io/enforce missing (the profile wants restricted)" in psa["seen"]
    )
    assert psa["fix"].startswith(f"kubectl label namespace {tenant} --overwrite ")
    assert "pod-security.kubernetes.io/enforce=restricted" in psa["fix"]
    assert "pod-security.kubernetes.io/enforce-version=v1.36" in psa["fix"]
    bundle = checks[f"tenant.{tenant}.bundle"]
    assert bundle["status"] == "fail" and "missing (" in bundle["seen"]
    assert f"NetworkPolicy/{tenant}/secureml-default-deny" in bundle["seen"]
    assert checks[f"tenant.{tenant}.bindings"]["status"] == "fail"

    # Only the warn label wrong: a warning, not a failure (enforce holds).
    labels = {
        key: value
        for obj in render_objects(load_profile(profile), BundleOptions())
        if obj["kind"] == "Namespace"
        for key, value in obj["metadata"]["labels"].items()
        if key.startswith("pod-security.kubernetes.io/")
    }
    patch(
        k8s_cluster,
        f"/api/v1/namespaces/{tenant}",
        {"metadata": {"labels": {**labels, "pod-security.kubernetes.io/warn": "baseline"}}},
    )
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    psa = checks_of(document)[f"tenant.{tenant}.pod-security"]
    assert psa["status"] == "warn"
    assert psa["seen"] == "pod-security.kubernetes.io/warn=baseline (the profile wants restricted)"


def test_a_bundle_for_an_api_the_server_does_not_serve_is_a_finding(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    """Rendered for 1.35, the bundle's MutatingAdmissionPolicy is v1beta1, which this 1.36 server
    does not serve: a finding with the version to render for, not a crash."""
    profile, tenant = fresh_profile(tmp_path)
    code, document = doctor(k8s_cluster, "--profiles", str(profile), "--k8s-version", "1.35")
    checks = checks_of(document)
    bundle = checks[f"tenant.{tenant}.bundle"]
    assert code == 1 and bundle["status"] == "fail"
    assert (
        "MutatingAdmissionPolicy is not served at admissionregistration.k8s.io/v1beta1"
        in (bundle["seen"])
    )
    assert "--k8s-version 1.36" in bundle["fix"]
    assert checks["cluster.version"]["status"] == "warn"


def _create(k8s_cluster: ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = k8s_cluster.request("POST", path, body)
    assert status == 201, answer
    assert isinstance(answer, dict)
    return answer


def _daemonset(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/x:1"}]},
            },
        },
    }


@pytest.fixture
def components(k8s_cluster: ControlPlane) -> Iterator[list[str]]:
    """Paths of the objects the component test creates; deleted afterwards, newest first (the
    cluster-wide ones too: no other test uses them; the workloads before their namespace, whose
    deletion the namespace controller finishes only later)."""
    created: list[str] = []
    yield created
    for path in reversed(created):
        k8s_cluster.request("DELETE", path)


def test_missing_components_fail_with_their_fix_and_pass_once_there(
    k8s_cluster: ControlPlane, tmp_path: Path, components: list[str]
) -> None:
    profile, tenant = fresh_profile(tmp_path)
    code, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    assert code == 1
    expected = {
        "spiffe.csi-driver": "install the SPIFFE CSI driver",
        "spire.server": "install SPIRE",
        "spire.agent": "install SPIRE's agent DaemonSet",
        "gpu.device-plugin": "install the NVIDIA GPU Operator or the nvidia-device-plugin",
        "gpu.resources": "nvidia.com/mig-1g.10gb: run the device plugin with MIG strategy mixed",
        "images.policy-controller": "install Sigstore's policy-controller",
    }
    for name, fix in expected.items():
        assert checks[name]["status"] == "fail", checks[name]
        assert fix in checks[name]["fix"], checks[name]
    assert f"tenant(s) {tenant} require identity" in checks["spiffe.csi-driver"]["seen"]
    dcgm = checks["monitoring.dcgm-exporter"]
    assert dcgm["status"] == "warn" and "install dcgm-exporter" in dcgm["fix"]
    assert checks["spire.clusterspiffeid"]["status"] == "pass"  # the harness installs the CRD

    # The components, as their installs create them (status written by hand: no controllers).
    ns = f"gpu-{uuid.uuid4().hex[:6]}"
    k8s_cluster.create_namespace(ns)
    components.append(f"/api/v1/namespaces/{ns}")
    node = f"gpu-node-{uuid.uuid4().hex[:6]}"
    _create(
        k8s_cluster,
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
    )
    components.append(f"/api/v1/nodes/{node}")
    allocatable = {
        "cpu": "8",
        "nvidia.com/gpu": "2",
        "nvidia.com/gpu.shared": "8",
        **{f"nvidia.com/mig-{p}": "1" for p in ("1g.10gb", "2g.20gb", "3g.40gb")},
    }
    status, answer = k8s_cluster.request(
        "PUT",
        f"/api/v1/nodes/{node}/status",
        {
            **admin(k8s_cluster).get(f"/api/v1/nodes/{node}"),
            "status": {"capacity": allocatable, "allocatable": allocatable},
        },
    )
    assert status == 200, answer
    for name, labels in (
        ("nvidia-device-plugin-daemonset", {"app.kubernetes.io/part-of": "gpu-operator"}),
        ("spire-agent", {}),
        ("nvidia-dcgm-exporter", {}),
    ):
        stored = _create(
            k8s_cluster, f"/apis/apps/v1/namespaces/{ns}/daemonsets", _daemonset(name, ns, labels)
        )
        ready = {
            "desiredNumberScheduled": 1,
            "numberReady": 1,
            "currentNumberScheduled": 1,
            "numberMisscheduled": 0,
        }
        status, answer = k8s_cluster.request(
            "PUT",
            f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}/status",
            {**stored, "status": ready},
        )
        assert status == 200, answer
        components.append(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}")
    server = _daemonset("spire-server", ns, {})
    server.update(kind="StatefulSet")
    server["spec"].update(replicas=1, serviceName="spire-server")
    stored = _create(k8s_cluster, f"/apis/apps/v1/namespaces/{ns}/statefulsets", server)
    components.append(f"/apis/apps/v1/namespaces/{ns}/statefulsets/spire-server")
    status, answer = k8s_cluster.request(
        "PUT",
        f"/apis/apps/v1/namespaces/{ns}/statefulsets/spire-server/status",
        {**stored, "status": {"replicas": 1, "readyReplicas": 1}},
    )
    assert status == 200, answer
    existing, _ = k8s_cluster.request("GET", "/apis/storage.k8s.io/v1/csidrivers/csi.spiffe.io")
    assert existing == 404, "another test made the SPIFFE CSI driver: this test would delete it"
    _create(
        k8s_cluster,
        "/apis/storage.k8s.io/v1/csidrivers",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": "csi.spiffe.io"},
            "spec": {
                "attachRequired": False,
                "podInfoOnMount": True,
                "volumeLifecycleModes": ["Ephemeral"],
            },
        },
    )
    components.append("/apis/storage.k8s.io/v1/csidrivers/csi.spiffe.io")

    # policy-controller's webhook (selecting no object: nothing on this shared server calls it)
    # and its config map.
    webhook = f"policy.sigstore.dev-{ns}"
    _create(
        k8s_cluster,
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": webhook},
            "webhooks": [
                {
                    "name": "policy.sigstore.dev",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "clientConfig": {"service": {"name": "webhook", "namespace": ns}},
                    "objectSelector": {"matchLabels": {"doctor-test": ns}},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                }
            ],
        },
    )
    components.append(
        f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{webhook}"
    )
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-policy-controller", "namespace": ns},
        "data": {"no-match-policy": "deny"},
    }
    _create(k8s_cluster, f"/api/v1/namespaces/{ns}/configmaps", config)
    components.append(f"/api/v1/namespaces/{ns}/configmaps/config-policy-controller")

    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    for name in (*expected, "monitoring.dcgm-exporter"):
        assert checks[name]["status"] == "pass", checks[name]
        assert checks[name]["fix"] == ""
    assert checks["gpu.device-plugin"]["seen"] == f"{ns}/nvidia-device-plugin-daemonset: ready"
    assert "nvidia.com/mig-2g.20gb (1 node(s))" in checks["gpu.resources"]["seen"]

    # A device plugin that runs nowhere is not "there".
    k8s_cluster.request(
        "PUT",
        f"/apis/apps/v1/namespaces/{ns}/daemonsets/nvidia-device-plugin-daemonset/status",
        {
            **admin(k8s_cluster).get(
                f"/apis/apps/v1/namespaces/{ns}/daemonsets/nvidia-device-plugin-daemonset"
            ),
            "status": {
                "desiredNumberScheduled": 1,
                "numberReady": 0,
                "currentNumberScheduled": 1,
                "numberMisscheduled": 0,
            },
        },
    )
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    plugin = checks_of(document)["gpu.device-plugin"]
    assert plugin["status"] == "fail"
    assert plugin["seen"] == (
        f"found {ns}/nvidia-device-plugin-daemonset, not ready: "
        f"{ns}/nvidia-device-plugin-daemonset: 0 of 1 ready"
    )
    assert f"kubectl -n {ns} describe daemonset nvidia-device-plugin-daemonset" in plugin["fix"]

    # An image policy that fails open, or admits what no policy names, is a failure.
    patch(
        k8s_cluster,
        f"/api/v1/namespaces/{ns}/configmaps/config-policy-controller",
        {"data": {"no-match-policy": "warn"}},
    )
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    images = checks_of(document)["images.policy-controller"]
    assert images["status"] == "fail"
    assert f"ConfigMap {ns}/config-policy-controller no-match-policy: warn" in images["seen"]


def test_without_profiles_the_tenants_on_the_cluster_are_named(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    _, tenant = applied(k8s_cluster, tmp_path, type_checked=False)
    code, document = doctor(k8s_cluster)
    checks = checks_of(document)
    assert not any(name.startswith("tenant.") for name in checks)
    tenants = checks["tenants"]
    assert tenants["status"] == "warn" and f"{tenant} (namespace {tenant})" in tenants["seen"]
    # Nobody is known to need SPIRE: its absence is a warning, and nothing failed.
    assert checks["spire.server"]["status"] == "warn"
    assert code == 0, [c for c in document["checks"] if c["status"] == "fail"]

    # The text report: one block per check, what was seen and the fix indented under it.
    result = CliRunner().invoke(
        app, ["doctor", "cluster", "--kubeconfig", str(k8s_cluster.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"doctor cluster: {k8s_cluster.url} (v1.36.3, kubeconfig ")
    at = lines.index("warn  tenants: tenant bundles checked")
    assert lines[at + 1].startswith("      seen: no --profiles given")
    assert lines[at + 2] == "      fix:  give the tenant profiles: --profiles FILE|DIR (repeatable)"
    counts = document["counts"]
    assert lines[-1] == f"0 failed, {counts['warn']} warning(s), {counts['pass']} passed"


def test_the_dra_driver_needs_its_device_classes_and_a_node_publishing_devices(
    k8s_cluster: ControlPlane, tmp_path: Path, components: list[str]
) -> None:
    """The `dra` backend on the real server: resource.k8s.io/v1 DeviceClasses and a ResourceSlice
    as NVIDIA's DRA driver creates them."""
    profile, tenant = fresh_profile(tmp_path, base="team-dra")
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    checks = checks_of(document)
    assert "gpu.device-plugin" not in checks  # the dra backend asks for no extended resource
    dra = checks["gpu.dra-driver"]
    assert dra["status"] == "fail"
    assert f"no DeviceClass gpu.nvidia.com (tenant(s) {tenant}); mig.nvidia.com" in dra["seen"]

    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        existing, _ = k8s_cluster.request("GET", f"/apis/resource.k8s.io/v1/deviceclasses/{name}")
        assert existing == 404, f"another test made DeviceClass {name}: this test would delete it"
        _create(
            k8s_cluster,
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": f"device.driver == 'gpu.nvidia.com' && '{name}' != ''"
                            }
                        }
                    ]
                },
            },
        )
        components.append(f"/apis/resource.k8s.io/v1/deviceclasses/{name}")
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    dra = checks_of(document)["gpu.dra-driver"]
    assert dra["status"] == "fail" and "no node publishes a ResourceSlice" in dra["seen"]

    node = f"dra-node-{uuid.uuid4().hex[:6]}"
    _create(
        k8s_cluster,
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
    )
    components.append(f"/api/v1/nodes/{node}")
    _create(
        k8s_cluster,
        "/apis/resource.k8s.io/v1/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        },
    )
    components.append(f"/apis/resource.k8s.io/v1/resourceslices/{node}-gpu.nvidia.com")
    _, document = doctor(k8s_cluster, "--profiles", str(profile))
    dra = checks_of(document)["gpu.dra-driver"]
    assert dra["status"] == "pass", dra
    assert dra["seen"] == (
        "DeviceClasses gpu.nvidia.com, mig.nvidia.com; 1 ResourceSlice(s) of gpu.nvidia.com"
    )
