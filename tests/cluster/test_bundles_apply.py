"""Every example profile's bundle is accepted by a real kube-apiserver, as rendered for it.

For each built version (1.36; 1.34, where MutatingAdmissionPolicy is beta behind its feature gate)
the bundle is rendered with `k8s_version` set to it and applied to a server of that version.

Each object is applied server-side (field manager `secureml-test`) with the kubernetes client's
dynamic client, so the server's own validation, CRD schemas (the real ones of
../shared/fixtures/crds) and CEL compilation judge it; no object may be refused and every API
version must be served. Then every ValidatingAdmissionPolicy's `status.typeChecking` (written by
kube-controller-manager's type-checking controller against the Pod schema) must carry no warning.

The bundles are applied to control planes of this module's own (`own_k8s_cluster`, here one per
version): team-a and team-a-dev share the `team-a` namespace, and their policies would otherwise
layer over what other modules test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from secureml.bundle import BundleOptions, render_objects
from secureml.bundle.mutation.policy import policy_api_version
from secureml.core.k8s_versions import K8sVersion
from secureml.profile.model import load_profile
from tests.harness.controlplane import ControlPlane
from tests.support.control_planes import control_plane

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml")) + sorted(
    (ROOT / "examples" / "profiles").glob("*.yaml")
)
VERSIONS: tuple[K8sVersion, ...] = ("1.36", "1.34")
# The two image-policy engines render different objects; the second variant also renders the
# plain ResourceQuota instead of Kubeflow's Profile.
VARIANTS: dict[str, dict[str, Any]] = {
    "policy-controller": {},
    "kyverno-no-kubeflow-profile": {"image_policy": "kyverno", "kubeflow_profile": False},
}
TYPE_CHECK_TIMEOUT_S = 30.0


@pytest.fixture(scope="module", params=VERSIONS)
def own_k8s_cluster(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    yield from control_plane(request.param)


@pytest.fixture(scope="module")
def dynamic(own_k8s_cluster: ControlPlane) -> DynamicClient:
    return DynamicClient(own_k8s_cluster.api_client())


def _apply(dynamic: DynamicClient, obj: dict[str, Any]) -> str | None:
    """Apply `obj`; None, or why the server would not take it."""
    try:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        return f"{obj['apiVersion']} {obj['kind']} is not served"
    try:
        dynamic.server_side_apply(
            resource,
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager="secureml-test",
            force_conflicts=True,
        )
    except ApiException as error:
        try:
            return str(json.loads(error.body)["message"])
        except (TypeError, ValueError, KeyError):
            return f"HTTP {error.status}: {error.body}"
    return None


def _type_warnings(cluster: ControlPlane, names: list[str]) -> dict[str, list[str]]:
    """Each policy's status.typeChecking warnings, once the controller has checked its generation."""
    found: dict[str, list[str]] = {}
    deadline = time.monotonic() + TYPE_CHECK_TIMEOUT_S
    while len(found) < len(names):
        for name in names:
            if name in found:
                continue
            status, policy = cluster.request(
                "GET", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"
            )
            assert status == 200, policy
            checked = policy.get("status") or {}
            if checked.get("observedGeneration") == policy["metadata"]["generation"]:
                found[name] = [
                    f"{warning['fieldRef']}: {warning['warning'].splitlines()[0]}"
                    for warning in (checked.get("typeChecking") or {}).get("expressionWarnings", [])
                ]
        if len(found) < len(names) and time.monotonic() > deadline:
            errors = [
                line
                for line in cluster.log(400, "kube-controller-manager").splitlines()
                if line.startswith("E")
            ]
            pytest.fail(
                f"{sorted(set(names) - set(found))}: no type checking within "
                f"{TYPE_CHECK_TIMEOUT_S:.0f} s; kube-controller-manager's last errors: {errors[-2:]}",
                pytrace=False,
            )
        time.sleep(0.25)
    return found


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_bundle_is_accepted_and_type_checks_clean(
    own_k8s_cluster: ControlPlane, dynamic: DynamicClient, path: Path, variant: str
) -> None:
    options = BundleOptions(k8s_version=own_k8s_cluster.version, **VARIANTS[variant])  # type: ignore[arg-type]
    objects = render_objects(load_profile(path), options)
    refused = {
        f"{obj['kind']}/{obj['metadata']['name']}": why
        for obj in objects
        if (why := _apply(dynamic, obj)) is not None
    }
    assert refused == {}
    kinds = {obj["kind"] for obj in objects}
    assert {"Namespace", "ValidatingAdmissionPolicy"} <= kinds
    policies = [
        obj["metadata"]["name"] for obj in objects if obj["kind"] == "ValidatingAdmissionPolicy"
    ]
    warnings = _type_warnings(own_k8s_cluster, policies)
    assert {name: found for name, found in warnings.items() if found} == {}


def test_a_refusal_is_seen(own_k8s_cluster: ControlPlane, dynamic: DynamicClient) -> None:
    """Guard: the server does refuse what the old renderer wrote (a mixed-type map literal)."""
    why = _apply(
        dynamic,
        {
            "apiVersion": policy_api_version(BundleOptions(k8s_version=own_k8s_cluster.version)),  # type: ignore[arg-type]
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "mixed-literal"},
            "spec": {
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
                "reinvocationPolicy": "Never",
                "mutations": [
                    {
                        "patchType": "JSONPatch",
                        "jsonPatch": {
                            "expression": '[JSONPatch{op: "add", path: "/spec/volumes/-", '
                            'value: {"name": "x", "csi": {"driver": "d", "readOnly": true}}}]'
                        },
                    }
                ],
            },
        },
    )
    assert why is not None
    assert "expected type" in why
