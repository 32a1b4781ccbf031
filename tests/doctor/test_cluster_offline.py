"""`secureml doctor cluster` without a server: the drift projection, an unreachable cluster, and the
answers of a cluster whose state the real test server cannot take (CRDs not installed, a DRA
driver, Kyverno, a refusal to read), through a `Cluster` whose requests answer from a dict.

The real-server tests are tests/cluster/test_doctor_cluster.py.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secureml.bundle import BundleOptions, render_objects
from secureml.cli import app
from secureml.cluster.connection import Cluster, Resource, Response, ServerRefusedError
from secureml.core.errors import ClusterError
from secureml.doctor.cluster import cluster_report, profile_files
from secureml.doctor.cluster_drift import object_drift, project, same_value
from secureml.profile.model import load_profile

REPO = Path(__file__).resolve().parents[2]
TEAM_A = REPO / "profiles" / "team-a.yaml"
TEAM_DRA = REPO / "profiles" / "team-dra.yaml"


class DictCluster(Cluster):
    """Answers GETs from `objects` (path -> body) and discovery from `kinds` (apiVersion ->
    kind -> resource); `forbidden` paths answer 403."""

    def __init__(
        self,
        objects: Mapping[str, dict[str, Any]],
        kinds: Mapping[str, dict[str, Resource]],
        forbidden: tuple[str, ...] = (),
    ) -> None:
        super().__init__(api=None, server="https://cluster.example", source="test")  # type: ignore[arg-type]
        self.objects = dict(objects)
        self.kinds = dict(kinds)
        self.forbidden = forbidden

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Response:
        assert method == "GET", "the doctor only reads"
        if path in self.forbidden:
            raise ServerRefusedError(403, {"message": "forbidden", "reason": "Forbidden"})
        if path in self.objects:
            return Response(200, self.objects[path], [])
        if path.rsplit("/", 1)[-1] in {
            r.name for kinds in self.kinds.values() for r in kinds.values()
        }:
            return Response(200, {"items": []}, [])
        raise ServerRefusedError(404, {"message": "not found", "reason": "NotFound"})

    def served(self, api_version: str) -> dict[str, Resource] | None:
        return self.kinds.get(api_version)


BUILT_IN = {
    "v1": {
        "Namespace": Resource("namespaces", False),
        "Node": Resource("nodes", False),
        "ConfigMap": Resource("configmaps", True),
    },
    "apps/v1": {
        "DaemonSet": Resource("daemonsets", True),
        "StatefulSet": Resource("statefulsets", True),
        "Deployment": Resource("deployments", True),
    },
    "admissionregistration.k8s.io/v1": {
        "ValidatingWebhookConfiguration": Resource("validatingwebhookconfigurations", False),
        "MutatingWebhookConfiguration": Resource("mutatingwebhookconfigurations", False),
    },
}


def checks_of(cluster: Cluster, *profiles: Path, **options: Any) -> dict[str, Any]:
    tenants = [(path, load_profile(path)) for path in profiles]
    report = cluster_report(cluster, tenants, BundleOptions(**options), "v1.36.3")
    return {check.name: check for check in report.checks}


def test_projection_keeps_what_the_render_sets_and_extra_list_items() -> None:
    rendered = {"a": {"b": 1, "c": [{"x": "1"}]}, "q": "16Gi"}
    stored = {
        "a": {"b": 1, "c": [{"x": 1, "default": True}, {"x": "added"}], "d": 3},
        "q": "16384Mi",
        "status": {},
    }
    assert project(rendered, stored) == {
        "a": {"b": 1, "c": [{"x": "1"}, {"x": "added"}]},
        "q": "16Gi",
    }
    assert same_value("2", 2) and same_value("1Gi", "1024Mi")
    assert not same_value(True, "true") and not same_value("Deny", "Warn")


def test_drift_is_empty_in_sync_and_a_diff_otherwise() -> None:
    rendered = {"kind": "X", "metadata": {"name": "n", "labels": {"k": "v"}}}
    stored = {"kind": "X", "metadata": {"name": "n", "uid": "u", "labels": {"k": "v", "o": "1"}}}
    assert object_drift(rendered, stored, "X/n") == ""
    stored["metadata"]["labels"] = {"o": "1"}
    diff = object_drift(rendered, stored, "X/n")
    assert diff.startswith("--- rendered/X/n\n+++ cluster/X/n\n")
    assert "-    k: v\n" in diff


def test_an_unreachable_cluster_is_exit_2(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    result = CliRunner().invoke(
        app, ["doctor", "cluster", "--kubeconfig", str(kubeconfig), "--format", "json"]
    )
    assert result.exit_code == 2, result.output
    assert "error: cannot reach the API server" in result.output
    assert "Traceback" not in result.output and result.stdout == ""
    result = CliRunner().invoke(
        app, ["doctor", "cluster", "--kubeconfig", str(kubeconfig), "--context", "other"]
    )
    assert result.exit_code == 2, result.output
    assert f"error: cannot use kubeconfig {kubeconfig}, context other" in result.output


def test_crds_not_installed_are_findings_not_errors() -> None:
    """A cluster serving only the built-in kinds: the bundle's custom resources are reported with
    the component to install, and so is each missing component."""
    checks = checks_of(DictCluster({}, BUILT_IN), TEAM_A)
    bundle = checks["tenant.team-a.bundle"]
    assert bundle.status == "fail"
    assert "SPIRE's spire-controller-manager is not installed" in bundle.seen
    assert "Sigstore policy-controller is not installed" in bundle.seen
    assert "install SPIRE with its controller manager" in bundle.fix
    spiffe_ids = checks["spire.clusterspiffeid"]
    assert spiffe_ids.status == "fail" and "CRD (spire.spiffe.io/v1alpha1) is not installed" in (
        spiffe_ids.seen
    )
    images = checks["images.policy-controller"]
    assert images.status == "fail"
    assert "ClusterImagePolicy (policy.sigstore.dev/v1beta1) is not served" in images.seen
    assert "gpu.dra-driver" not in checks  # team-a is on the device plugin


def _dra_kinds() -> dict[str, dict[str, Resource]]:
    return {
        **BUILT_IN,
        "resource.k8s.io/v1": {
            "DeviceClass": Resource("deviceclasses", False),
            "ResourceSlice": Resource("resourceslices", False),
        },
    }


def test_the_dra_backend_needs_the_device_classes_and_slices_of_the_driver() -> None:
    objects = render_objects(load_profile(TEAM_DRA), BundleOptions())
    classes = {
        request["exactly"]["deviceClassName"]
        for obj in objects
        if obj["kind"] == "ResourceClaimTemplate"
        for request in obj["spec"]["spec"]["devices"]["requests"]
    }
    assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}
    dra = checks_of(DictCluster({}, _dra_kinds()), TEAM_DRA)["gpu.dra-driver"]
    assert dra.status == "fail" and "no DeviceClass gpu.nvidia.com (tenant(s) team-dra)" in dra.seen
    assert "nvidia-dra-driver-gpu" in dra.fix

    device_classes = {
        "items": [{"metadata": {"name": name}} for name in ("gpu.nvidia.com", "mig.nvidia.com")]
    }
    state = {"/apis/resource.k8s.io/v1/deviceclasses": device_classes}
    dra = checks_of(DictCluster(state, _dra_kinds()), TEAM_DRA)["gpu.dra-driver"]
    assert dra.status == "fail" and "no node publishes a ResourceSlice" in dra.seen

    state["/apis/resource.k8s.io/v1/resourceslices"] = {
        "items": [{"metadata": {"name": "node-1-gpu"}, "spec": {"driver": "gpu.nvidia.com"}}]
    }
    checks = checks_of(DictCluster(state, _dra_kinds()), TEAM_DRA)
    assert checks["gpu.dra-driver"].status == "pass"
    assert "gpu.device-plugin" not in checks  # team-dra asks for no extended resource


def test_kyverno_needs_a_fail_closed_webhook_for_image_validating_policies() -> None:
    """Kyverno's `-ignore` webhooks (policies with failurePolicy Ignore) are normal; the bundle's
    ImageValidatingPolicy needs the `ivpol.*` webhook with failurePolicy Fail."""
    kinds = {
        **BUILT_IN,
        "policies.kyverno.io/v1": {
            "ImageValidatingPolicy": Resource("imagevalidatingpolicies", False)
        },
    }
    hooks: list[dict[str, Any]] = [
        {"name": "gpol.validate.kyverno.svc-ignore", "failurePolicy": "Ignore"},
        {"name": "ivpol.validate.kyverno.svc-ignore", "failurePolicy": "Ignore"},
    ]
    listing = {
        "items": [
            {"metadata": {"name": "kyverno-resource-validating-webhook-cfg"}, "webhooks": hooks}
        ]
    }
    state = {"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": listing}
    checks = checks_of(DictCluster(state, kinds), TEAM_A, image_policy="kyverno")
    assert "images.policy-controller" not in checks
    kyverno = checks["images.kyverno"]
    assert kyverno.status == "fail"
    assert "no ImageValidatingPolicy webhook (ivpol.*) with failurePolicy Fail" in kyverno.seen
    hooks.append({"name": "ivpol.validate.kyverno.svc-fail", "failurePolicy": "Fail"})
    kyverno = checks_of(DictCluster(state, kinds), TEAM_A, image_policy="kyverno")["images.kyverno"]
    assert kyverno.status == "pass", kyverno


def test_a_policy_controller_webhook_that_fails_open_is_a_failure() -> None:
    kinds = {
        **BUILT_IN,
        "policy.sigstore.dev/v1beta1": {
            "ClusterImagePolicy": Resource("clusterimagepolicies", False)
        },
    }
    hook = {"name": "policy.sigstore.dev", "failurePolicy": "Ignore"}
    listing = {"items": [{"metadata": {"name": "policy.sigstore.dev"}, "webhooks": [hook]}]}
    state = {"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": listing}
    images = checks_of(DictCluster(state, kinds), TEAM_A)["images.policy-controller"]
    assert images.status == "fail"
    assert images.seen.startswith("failurePolicy Ignore on policy.sigstore.dev (")
    hook["failurePolicy"] = "Fail"
    assert checks_of(DictCluster(state, kinds), TEAM_A)["images.policy-controller"].status == "pass"


def test_a_refusal_to_read_is_an_unusable_cluster() -> None:
    cluster = DictCluster({}, BUILT_IN, forbidden=("/apis/apps/v1/daemonsets",))
    with pytest.raises(ClusterError) as raised:
        checks_of(cluster)
    assert raised.value.exit_code == 2
    assert "refused GET /apis/apps/v1/daemonsets (403 Forbidden)" in raised.value.what


def test_clusterspiffeid_entries_the_controller_could_not_set_fail() -> None:
    kinds = {
        **BUILT_IN,
        "spire.spiffe.io/v1alpha1": {"ClusterSPIFFEID": Resource("clusterspiffeids", False)},
    }
    listing = {
        "items": [
            {
                "metadata": {
                    "name": "secureml-team-a-steps",
                    "labels": {"app.kubernetes.io/managed-by": "secureml"},
                },
                "status": {"stats": {"podsSelected": 3, "entriesToSet": 3, "entryFailures": 3}},
            }
        ]
    }
    state = {"/apis/spire.spiffe.io/v1alpha1/clusterspiffeids": listing}
    check = checks_of(DictCluster(state, kinds), TEAM_A)["spire.clusterspiffeid"]
    assert check.status == "fail"
    assert check.seen.endswith("secureml-team-a-steps: entryFailures 3")
    assert "trust domain" in check.fix
    listing["items"][0]["status"]["stats"]["entryFailures"] = 0
    assert checks_of(DictCluster(state, kinds), TEAM_A)["spire.clusterspiffeid"].status == "pass"


def test_profiles_are_files_or_folders_of_yaml(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "b.yaml").write_text(TEAM_A.read_text())
    (folder / "a.yml").write_text(TEAM_DRA.read_text())
    (folder / "schema.json").write_text("{}")
    assert profile_files([folder, TEAM_A]) == [folder / "a.yml", folder / "b.yaml", TEAM_A]
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, message in (
        ([str(empty)], "no *.yaml profile in the folder"),
        ([str(tmp_path / "missing.yaml")], "no such file or folder"),
    ):
        result = CliRunner().invoke(app, ["doctor", "cluster", "--profiles", *args])
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
