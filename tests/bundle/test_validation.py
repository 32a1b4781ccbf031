"""Every object of every example bundle against the real schemas.

Built-in kinds: kubernetes-validate's bundled OpenAPI schemas, strict (no unknown fields), for each
supported Kubernetes version. Custom resources: the openAPIV3Schema of the real CRD from
../shared/fixtures/crds, made strict the way the API server prunes (unknown fields are errors
unless the schema preserves them).
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from secureml.bundle import BundleOptions
from secureml.bundle.common import K8S_VERSIONS
from secureml.profile.model import TenantProfile
from tests.bundle.conftest import rendered
from tests.support.crd_schemas import strict_schema
from tests.support.paths import fixture_dir

BUILT_IN_GROUPS = {
    "v1",
    "apps",
    "rbac.authorization.k8s.io",
    "networking.k8s.io",
    "admissionregistration.k8s.io",
    "resource.k8s.io",
}
OPTION_SETS = [
    pytest.param(
        dict(image_policy="policy-controller", kubeflow_profile=True),
        id="policy-controller+profile",
    ),
    pytest.param(dict(image_policy="kyverno", kubeflow_profile=False), id="kyverno+quota"),
]


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else api_version


@cache
def _crd_file(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def crd_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    """The strict schema of `kind` at `api_version` from the fixture CRDs, or None if none serves it."""
    group, version_name = api_version.split("/")
    for path in sorted(fixture_dir("crds").glob(f"{group}_*.yaml")):
        crd = _crd_file(path)
        if crd["spec"]["names"]["kind"] != kind:
            continue
        for version in crd["spec"]["versions"]:
            if version["name"] == version_name:
                schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                # The API server always knows the root's apiVersion, kind and metadata.
                root = schema.setdefault("properties", {})
                root.setdefault("apiVersion", {"type": "string"})
                root.setdefault("kind", {"type": "string"})
                root.setdefault("metadata", {"type": "object"})
                return strict_schema(schema)
    return None


def _bundle(
    profile: TenantProfile, k8s_version: str, options: dict[str, Any]
) -> list[dict[str, Any]]:
    return rendered(profile.metadata.name, BundleOptions(k8s_version=k8s_version, **options))


@pytest.mark.parametrize("options", OPTION_SETS)
@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_built_in_objects_validate_strictly(
    profile: TenantProfile, k8s_version: str, options: dict
) -> None:
    checked = set()
    for obj in _bundle(profile, k8s_version, options):
        if _group(obj["apiVersion"]) not in BUILT_IN_GROUPS:
            continue
        try:
            validated = kubernetes_validate.validate(obj, k8s_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} ({k8s_version}): {err.message} at {list(err.path)}"
            )
        assert validated == k8s_version  # the schemas of exactly that version were used
        checked.add(obj["kind"])
    assert {
        "Namespace",
        "Role",
        "NetworkPolicy",
        "ValidatingAdmissionPolicy",
        "MutatingAdmissionPolicy",
    } <= checked


@pytest.mark.parametrize("options", OPTION_SETS)
def test_custom_resources_validate_against_real_crds(profile: TenantProfile, options: dict) -> None:
    seen = set()
    for obj in _bundle(profile, "1.36", options):
        if _group(obj["apiVersion"]) in BUILT_IN_GROUPS:
            continue
        schema = crd_schema(obj["apiVersion"], obj["kind"])
        assert schema is not None, f"no fixture CRD serves {obj['apiVersion']} {obj['kind']}"
        try:
            jsonschema.Draft7Validator(schema).validate(obj)
        except jsonschema.ValidationError as err:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {list(err.absolute_path)}"
            )
        seen.add(obj["kind"])
    assert "ClusterSPIFFEID" in seen
    assert (
        "ImageValidatingPolicy" if options["image_policy"] == "kyverno" else "ClusterImagePolicy"
    ) in seen


def test_strict_crd_schema_rejects_an_unknown_field() -> None:
    """The strictness above is real: a misspelt field fails."""
    schema = crd_schema("spire.spiffe.io/v1alpha1", "ClusterSPIFFEID")
    good = {
        "apiVersion": "spire.spiffe.io/v1alpha1",
        "kind": "ClusterSPIFFEID",
        "metadata": {"name": "x"},
        "spec": {"spiffeIDTemplate": "spiffe://td/x"},
    }
    validator = jsonschema.Draft7Validator(schema)
    validator.validate(good)
    bad = copy.deepcopy(good)
    bad["spec"]["spiffeIdTemplate"] = bad["spec"].pop("spiffeIDTemplate")
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


@pytest.mark.parametrize("k8s_version", ["1.34", "1.35"])
def test_mutating_policy_v1_is_not_served_before_1_36(k8s_version: str) -> None:
    """Why the bundle writes v1beta1 for 1.34/1.35: those versions' schemas have no v1 kind."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "x"},
        "spec": {},
    }
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(policy, k8s_version, strict=True)
    kubernetes_validate.validate(policy, "1.36", strict=True)
