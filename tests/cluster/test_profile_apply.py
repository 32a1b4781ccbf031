"""`secureml profile apply` against the real kube-apiserver of the session (tests/harness).

Every example profile's bundle applies (both image-policy engines) and re-applies unchanged; a
dry run stores nothing; a kind the server does not serve is named with its component before
anything is written; a refused object and a field-manager conflict are errors naming the object,
the field and the server's message. Tests that change or create tenants use fresh tenant names, so
the shared server's example tenants stay as every other test expects them.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secureml.bundle import BundleOptions, render_objects
from secureml.cli import app
from secureml.cluster import BundleRefusedError, apply_bundle
from secureml.cluster.apply import FIELD_MANAGER
from secureml.core.errors import ClusterError
from secureml.profile.model import load_profile
from tests.harness.controlplane import ControlPlane
from tests.support.cluster_bundles import PROFILES, admin, fresh_profile, stored


def _apply(k8s_cluster: ControlPlane, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        ["profile", "apply", *args, "--kubeconfig", str(k8s_cluster.kubeconfig)],
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("engine", ["policy-controller", "kyverno"])
@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_every_example_profile_applies(
    k8s_cluster: ControlPlane, profile: Path, engine: str
) -> None:
    cluster = admin(k8s_cluster)
    code, output = _apply(
        k8s_cluster, str(profile), "--image-policy", engine, "--type-check-wait", "60"
    )
    assert code == 0, output
    assert "warning:" not in output  # kube-controller-manager type-checked every policy: clean
    assert "reported no type checking" not in output
    objects = render_objects(load_profile(profile), BundleOptions(image_policy=engine))
    for obj in objects:
        found = stored(cluster, obj)
        assert found is not None, f"{obj['kind']}/{obj['metadata']['name']} was not stored"
        managers = {entry["manager"] for entry in found["metadata"].get("managedFields", [])}
        assert FIELD_MANAGER in managers, (obj["kind"], managers)
    # Applying the same bundle again changes nothing and refuses nothing.
    code, output = _apply(
        k8s_cluster, str(profile), "--image-policy", engine, "--type-check-wait", "0"
    )
    assert code == 0, output
    assert "created" not in output.replace("(dry run)", "")


def test_type_checking_warnings_are_read_back_with_their_rule(k8s_cluster: ControlPlane) -> None:
    """A validation naming a field the Pod schema lacks compiles (the API server accepts it) but
    type-checks with a warning (kube-controller-manager's validatingadmissionpolicy-status-
    controller): apply reports it with the rule id its message starts with."""
    cluster = admin(k8s_cluster)
    name = f"secureml-typo-{uuid.uuid4().hex[:6]}"
    policy = _pod_policy(
        name,
        [
            {"expression": "true", "message": "test.fine: always holds"},
            {
                "expression": "object.spec.hostPIDs == false",
                "message": "test.typo: the field is misspelt",
            },
        ],
    )
    result = apply_bundle([policy], cluster=cluster, typecheck_timeout_s=60)
    assert len(result.warnings) == 1, (result.warnings, result.notes)
    (warning,) = result.warnings
    assert warning.startswith(
        f"ValidatingAdmissionPolicy/{name}: spec.validations[1].expression (test.typo): "
    )
    assert "hostPIDs" in warning


def test_dry_run_stores_nothing(k8s_cluster: ControlPlane, tmp_path: Path) -> None:
    cluster = admin(k8s_cluster)
    profile, namespace = fresh_profile(tmp_path)
    objects = render_objects(load_profile(profile), BundleOptions())

    # The tenant namespace does not exist: its objects cannot be dry-run, and say so.
    code, output = _apply(k8s_cluster, str(profile), "--dry-run", "server")
    assert code == 0, output
    assert "(dry run)" in output
    assert f"skipped    NetworkPolicy/{namespace}/secureml-default-deny" in output
    assert f"namespace(s) {namespace} do not exist yet" in output
    assert all(stored(cluster, obj) is None for obj in objects)

    # With the namespace there, every object goes through the server's validation and admission.
    k8s_cluster.create_namespace(namespace)
    code, output = _apply(k8s_cluster, str(profile), "--dry-run", "server")
    assert code == 0, output
    assert "skipped" not in output
    assert output.count("created    ") == len(objects) - 1  # all but the existing namespace
    left = [obj for obj in objects if obj["kind"] != "Namespace" and stored(cluster, obj)]
    assert left == []
    namespace_object = cluster.get(f"/api/v1/namespaces/{namespace}")
    assert "pod-security.kubernetes.io/enforce" not in namespace_object["metadata"].get(
        "labels", {}
    )


def test_kind_not_served_names_its_component_and_writes_nothing(
    k8s_cluster: ControlPlane,
) -> None:
    """The fixture installs no ServiceMonitor CRD: the Prometheus Operator is named, and the
    namespace before it in the same bundle is not created."""
    cluster = admin(k8s_cluster)
    namespace = f"unserved-{uuid.uuid4().hex[:6]}"
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "dcgm", "namespace": namespace},
            "spec": {"selector": {}, "endpoints": [{"port": "metrics"}]},
        },
    ]
    with pytest.raises(ClusterError) as raised:
        apply_bundle(objects, cluster=cluster)
    text = raised.value.diagnostics()
    assert "Prometheus Operator is not installed" in text
    assert "ServiceMonitor (monitoring.coreos.com/v1: dcgm)" in text
    assert raised.value.exit_code == 2
    assert stored(cluster, objects[0]) is None


def test_beta_map_bundle_on_a_1_36_server_says_render_for_1_36(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    """A bundle rendered for 1.35 carries the v1beta1 MutatingAdmissionPolicy, which a 1.36 server
    does not serve by default: exit 2 before anything is written, with the version to render."""
    cluster = admin(k8s_cluster)
    profile, namespace = fresh_profile(tmp_path)
    code, output = _apply(k8s_cluster, str(profile), "--k8s-version", "1.35")
    assert code == 2, output
    assert "MutatingAdmissionPolicy is not served at admissionregistration.k8s.io/v1beta1" in output
    assert "--k8s-version 1.36" in output
    assert "nothing was applied" in output
    assert not cluster.exists(f"/api/v1/namespaces/{namespace}")


def test_refused_object_names_kind_name_field_and_message(k8s_cluster: ControlPlane) -> None:
    cluster = admin(k8s_cluster)
    name = f"secureml-broken-{uuid.uuid4().hex[:6]}"
    broken = _pod_policy(name, [{"expression": "object.spec.containers.all(c, c.name ==)"}])
    with pytest.raises(BundleRefusedError) as raised:
        apply_bundle([broken], cluster=cluster)
    text = raised.value.diagnostics()
    assert f"the API server refused to apply ValidatingAdmissionPolicy/{name} (422 Invalid)" in text
    assert "spec.validations[0].expression: Invalid value: compilation failed" in text
    assert "Syntax error" in text
    assert raised.value.exit_code == 1
    assert stored(cluster, broken) is None


def test_conflict_with_another_manager_is_refused_then_forced(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    """Someone weakens the tenant's Pod Security label with kubectl: a re-apply refuses to
    silently overwrite it and names the field and the manager; --force-conflicts restores it."""
    cluster = admin(k8s_cluster)
    profile, namespace = fresh_profile(tmp_path)
    code, output = _apply(k8s_cluster, str(profile), "--type-check-wait", "0")
    assert code == 0, output
    cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        query={"fieldManager": "kubectl-label"},
        body={"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
        content_type="application/merge-patch+json",
    )
    code, output = _apply(k8s_cluster, str(profile), "--type-check-wait", "0")
    assert code == 1, output
    assert f"the API server refused to apply Namespace/{namespace} (409 Conflict)" in output
    assert '.metadata.labels.pod-security.kubernetes.io/enforce: conflict with "kubectl-label"' in (
        output
    )
    assert "--force-conflicts" in output
    labels = cluster.get(f"/api/v1/namespaces/{namespace}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"

    code, output = _apply(k8s_cluster, str(profile), "--type-check-wait", "0", "--force-conflicts")
    assert code == 0, output
    labels = cluster.get(f"/api/v1/namespaces/{namespace}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def _pod_policy(name: str, validations: list[dict[str, str]]) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy over pod CREATEs with these validations (no binding)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": validations,
        },
    }


def test_the_program_applies_and_ends_with_everything_stored(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    """`secureml profile apply` as the program runs it (`secureml.cli.program`): every object is
    stored before the process ends, and the output and exit code are whole."""
    import subprocess
    import sys

    cluster = admin(k8s_cluster)
    profile, _ = fresh_profile(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "secureml",
        "profile",
        "apply",
        str(profile),
        "--kubeconfig",
        str(k8s_cluster.kubeconfig),
        "--type-check-wait",
        "0",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    objects = render_objects(load_profile(profile), BundleOptions())
    assert done.stdout.count("created    ") == len(objects)
    assert all(stored(cluster, obj) is not None for obj in objects)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "created    " not in again.stdout, again.stdout


def test_prune_deletes_what_the_profile_no_longer_renders(
    k8s_cluster: ControlPlane, tmp_path: Path
) -> None:
    import yaml

    path, name = fresh_profile(tmp_path)
    code, output = _apply(k8s_cluster, str(path), "--type-check-wait", "0")
    assert code == 0, output
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "secureml-gpu-alerts", "namespace": name},
    }
    cluster = admin(k8s_cluster)
    assert stored(cluster, rule) is not None
    document = yaml.safe_load(path.read_text())
    document["spec"]["monitoring"]["alerts"] = False  # the alerts leave the profile
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    code, output = _apply(k8s_cluster, str(path), "--prune", "--dry-run", "server")
    assert code == 0, output
    assert f"would delete PrometheusRule/{name}/secureml-gpu-alerts" in output
    assert stored(cluster, rule) is not None  # a dry run deletes nothing
    code, output = _apply(k8s_cluster, str(path), "--prune", "--type-check-wait", "0")
    assert code == 0, output
    assert f"deleted    PrometheusRule/{name}/secureml-gpu-alerts" in output
    assert stored(cluster, rule) is None
    assert f"Namespace/{name}" not in output.split("deleted")[-1]
    code, output = _apply(k8s_cluster, str(path), "--prune", "--type-check-wait", "0")
    assert code == 0 and "deleted" not in output, output  # nothing left to prune


def test_every_kind_a_bundle_renders_is_one_prune_knows() -> None:
    from secureml.cluster.prune import BUNDLE_KINDS

    for profile in PROFILES:
        for engine in ("policy-controller", "kyverno"):
            for version in ("1.34", "1.36"):
                options = BundleOptions(image_policy=engine, k8s_version=version)
                for obj in render_objects(load_profile(profile), options):
                    if obj["kind"] != "Namespace":
                        assert (obj["apiVersion"], obj["kind"]) in BUNDLE_KINDS, obj["kind"]
