"""Every CEL expression the bundle renders passes the API server's homogeneous-literal check.

The Python engine accepts mixed list and map literals that kube-apiserver refuses when the policy is
created (cel-go's HomogeneousAggregateLiterals): the offline tests would pass on a bundle no
cluster accepts. tests/support/cel_literals.py is that check; this test runs it over the rendered
ValidatingAdmissionPolicies (validations, messageExpressions, matchConditions) and
MutatingAdmissionPolicies (matchConditions, JSONPatch and ApplyConfiguration expressions) of every
example profile, for every supported Kubernetes version.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from secureml.bundle import BundleOptions
from secureml.core.k8s_versions import K8S_VERSIONS
from tests.bundle.conftest import PROFILES, rendered
from tests.support.cel_literals import type_errors

POLICY_KINDS = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")


def expressions(obj: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, CEL text) of every expression of an admission policy."""
    spec = obj["spec"]
    for i, condition in enumerate(spec.get("matchConditions", [])):
        yield f"matchConditions[{i}]", condition["expression"]
    for i, validation in enumerate(spec.get("validations", [])):
        yield f"validations[{i}].expression", validation["expression"]
        if "messageExpression" in validation:
            yield f"validations[{i}].messageExpression", validation["messageExpression"]
    for i, variable in enumerate(spec.get("variables", [])):
        yield f"variables[{i}]", variable["expression"]
    for i, mutation in enumerate(spec.get("mutations", [])):
        for key in ("jsonPatch", "applyConfiguration"):
            if key in mutation:
                yield f"mutations[{i}].{key}", mutation[key]["expression"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", [p.stem for p in PROFILES])
def test_rendered_policies_have_homogeneous_literals(name: str, version: str) -> None:
    policies = [
        obj
        for obj in rendered(name, BundleOptions(k8s_version=version))  # type: ignore[arg-type]
        if obj["kind"] in POLICY_KINDS
    ]
    assert {obj["kind"] for obj in policies} == set(POLICY_KINDS)
    problems = [
        f"{obj['kind']}/{obj['metadata']['name']} {where}: {error}"
        for obj in policies
        for where, text in expressions(obj)
        for error in type_errors(text)
    ]
    assert problems == []
