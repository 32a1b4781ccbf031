"""The bundle's guard on KFP's `metadata-grpc-configmap` (secureml.bundle.kfpconfig): the one
ConfigMap every step imports without a prefix holds only KFP's two keys. Evaluated through the
real CEL engine on the rendered policy's own text."""

from __future__ import annotations

from typing import Any

import cel
import pytest

from secureml.bundle.common import BundleOptions
from secureml.bundle.render import render_objects
from secureml.core import contract
from secureml.profile.model import load_profile
from secureml.rules.engine import compiled
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    profile = load_profile(REPO / "profiles" / "team-a.yaml")
    objects = render_objects(profile, BundleOptions())
    (found,) = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"] == "secureml-team-a-kfp-metadata-configmap"
    ]
    (binding,) = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
        and o["spec"]["policyName"] == found["metadata"]["name"]
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    return found


def run(expression: str, configmap: dict[str, Any]) -> object:
    return compiled(expression).execute(cel.Context({"object": configmap}))


def configmap(name: str = contract.KFP_METADATA_CONFIGMAP, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


KFP_DATA = {
    "METADATA_GRPC_SERVICE_HOST": "metadata-grpc-service.kubeflow",
    "METADATA_GRPC_SERVICE_PORT": "8080",
}


def test_policy_matches_configmap_writes_in_the_tenant_namespace(policy: dict[str, Any]) -> None:
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-a"}
    }
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["configmaps"] and rule["operations"] == ["CREATE", "UPDATE"]
    (condition,) = spec["matchConditions"]
    assert run(condition["expression"], configmap()) is True
    assert run(condition["expression"], configmap("kfp-launcher")) is False


@pytest.mark.parametrize(
    ("fields", "allowed"),
    [
        ({"data": KFP_DATA}, True),  # what KFP's profile controller writes
        ({"data": {"METADATA_GRPC_SERVICE_PORT": "8080"}}, True),
        ({}, True),
        ({"data": {**KFP_DATA, "LD_PRELOAD": "/tmp/evil.so"}}, False),
        ({"data": {"CUDA_DISABLE_CONTROL": "1"}}, False),
        ({"data": KFP_DATA, "binaryData": {"LD_AUDIT": "eA=="}}, False),
    ],
)
def test_only_kfps_keys(policy: dict[str, Any], fields: dict[str, Any], allowed: bool) -> None:
    (validation,) = policy["spec"]["validations"]
    assert run(validation["expression"], configmap(**fields)) is allowed
