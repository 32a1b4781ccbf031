"""The profile's required attestations in both image policy engines: the rendered objects against
the real CRDs, and the Kyverno CEL conditions deciding like the compiler's offline checks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cel_expr_python import cel

from secureml.bundle import BundleOptions, render_objects
from secureml.bundle.attestation_policies import payload_condition, rego_policy
from secureml.profile import predicates
from secureml.profile.model import AttestationRequirement, TenantProfile
from tests.bundle.test_validation import crd_schema
from tests.support.cel_literals import type_errors

ROOT = Path(__file__).resolve().parents[2]
GH = "https://token.actions.githubusercontent.com"
GENERATOR = "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@refs/tags/v2.1.0"
REQUIREMENTS = [
    {"type": predicates.CYCLONEDX},
    {"type": predicates.COSIGN_VULN, "maxSeverity": "HIGH"},
    {
        "type": predicates.SLSA_V1,
        "builder": {"id": GENERATOR},
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/slsa-framework/"}],
    },
]


def profile_with(requirements: list[dict[str, Any]], *, signed: bool = True) -> TenantProfile:
    data = copy.deepcopy(yaml.safe_load((ROOT / "profiles" / "team-a.yaml").read_text()))
    data["spec"]["images"]["attestations"] = requirements
    data["spec"]["images"]["signatures"]["required"] = signed
    return TenantProfile.from_dict(data, source="test")


def image_policies(profile: TenantProfile, engine: str) -> list[dict[str, Any]]:
    kinds = ("ClusterImagePolicy", "ImageValidatingPolicy")
    objects = render_objects(profile, BundleOptions(image_policy=engine))
    return [o for o in objects if o["kind"] in kinds]


def validate(obj: dict[str, Any]) -> None:
    schema = crd_schema(obj["apiVersion"], obj["kind"])
    assert schema is not None
    jsonschema.Draft7Validator(schema).validate(obj)


def test_policy_controller_one_policy_per_requirement() -> None:
    policies = {
        p["metadata"]["name"]: p
        for p in image_policies(profile_with(REQUIREMENTS), "policy-controller")
    }
    for policy in policies.values():
        validate(policy)
    signatures = policies["secureml-team-a-images"]["spec"]
    sbom, vuln, slsa = (policies[f"secureml-team-a-images-att{i}"]["spec"] for i in range(3))
    assert sbom["images"] == signatures["images"] and sbom["match"] == signatures["match"]
    [authority] = sbom["authorities"]
    assert (
        authority["keyless"]["identities"] == signatures["authorities"][0]["keyless"]["identities"]
    )
    [check] = authority["attestations"]
    assert (check["name"], check["predicateType"], check["policy"]["type"]) == (
        "att0",
        predicates.CYCLONEDX,
        "rego",
    )
    assert 'input.predicate.bomFormat == "CycloneDX"' in check["policy"]["data"]
    [check] = vuln["authorities"][0]["attestations"]
    assert check["policy"]["data"].startswith("package sigstore\n")
    assert 'allowed := {"LOW", "MEDIUM", "HIGH"}' in check["policy"]["data"]
    [builder] = slsa["authorities"]
    assert builder["keyless"]["identities"] == [
        {"issuer": GH, "subjectRegExp": r"^https://github\.com/slsa-framework/"}
    ]
    data = builder["attestations"][0]["policy"]["data"]
    assert f'input.predicate.runDetails.builder.id == "{GENERATOR}"' in data


def test_kyverno_attestations_and_their_validations() -> None:
    [policy] = image_policies(profile_with(REQUIREMENTS), "kyverno")
    validate(policy)
    spec = policy["spec"]
    assert [a["name"] for a in spec["attestors"]] == ["tenant", "att2"]
    assert spec["attestations"] == [
        {"name": f"att{i}", "intoto": {"type": r["type"]}} for i, r in enumerate(REQUIREMENTS)
    ]
    expressions = [v["expression"] for v in spec["validations"]]
    assert len(expressions) == 1 + 2 * len(REQUIREMENTS)
    assert (
        "verifyAttestationSignatures(image, attestations.att2, [attestors.att2])" in expressions[5]
    )
    assert (
        "verifyAttestationSignatures(image, attestations.att0, [attestors.tenant])"
        in expressions[1]
    )
    for expression in expressions:
        assert type_errors(expression) == []


def test_attestations_without_required_signatures() -> None:
    own = [{**REQUIREMENTS[2]}]
    [policy] = image_policies(profile_with(own, signed=False), "kyverno")
    validate(policy)
    assert [a["name"] for a in policy["spec"]["attestors"]] == ["att0"]
    assert not any(
        "verifyImageSignatures" in v["expression"] for v in policy["spec"]["validations"]
    )
    cips = image_policies(profile_with(own, signed=False), "policy-controller")
    names = [p["metadata"]["name"] for p in cips]
    assert "secureml-team-a-images-att0" in names
    for cip in cips:
        validate(cip)


def statement(predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    return {"predicateType": predicate_type, "predicate": predicate}


def scan(*severities: str) -> dict[str, Any]:
    findings = [{"VulnerabilityID": f"CVE-{i}", "Severity": s} for i, s in enumerate(severities)]
    return {
        "scanner": {
            "result": {
                "Results": [{"Target": "t", "Vulnerabilities": findings}, {"Target": "clean"}]
            }
        }
    }


CASES = [
    (REQUIREMENTS[0], statement(predicates.CYCLONEDX, {"bomFormat": "CycloneDX"})),
    (REQUIREMENTS[0], statement(predicates.CYCLONEDX, {"spdxVersion": "SPDX-2.3"})),
    ({"type": predicates.SPDX}, statement(predicates.SPDX, {"spdxVersion": "SPDX-2.3"})),
    (REQUIREMENTS[1], statement(predicates.COSIGN_VULN, scan("LOW", "HIGH"))),
    (REQUIREMENTS[1], statement(predicates.COSIGN_VULN, scan("MEDIUM", "CRITICAL"))),
    (REQUIREMENTS[1], statement(predicates.COSIGN_VULN, scan("UNKNOWN"))),
    (
        {"type": predicates.COSIGN_VULN, "maxSeverity": "NONE"},
        statement(predicates.COSIGN_VULN, scan()),
    ),
    (
        {"type": predicates.COSIGN_VULN, "maxSeverity": "NONE"},
        statement(predicates.COSIGN_VULN, scan("LOW")),
    ),
    (
        {"type": predicates.COSIGN_VULN, "maxSeverity": "CRITICAL"},
        statement(predicates.COSIGN_VULN, scan("UNKNOWN")),
    ),
    (
        REQUIREMENTS[2],
        statement(predicates.SLSA_V1, {"runDetails": {"builder": {"id": GENERATOR}}}),
    ),
    (
        REQUIREMENTS[2],
        statement(predicates.SLSA_V1, {"runDetails": {"builder": {"id": "https://evil"}}}),
    ),
    (
        {"type": predicates.SLSA_V02, "builder": {"id": "b"}},
        statement(predicates.SLSA_V02, {"builder": {"id": "b"}}),
    ),
    # a field left out, or of another type, must not pass (policy-controller's CUE would let it)
    (REQUIREMENTS[2], statement(predicates.SLSA_V1, {"runDetails": {}})),
    (
        {"type": predicates.SLSA_V1},
        statement(predicates.SLSA_V1, {"runDetails": {"builder": {"id": 7}}}),
    ),
    (
        {"type": predicates.SLSA_V1},
        statement(predicates.SLSA_V1, {"runDetails": {"builder": {"id": "b"}}}),
    ),
    ({"type": predicates.COSIGN_VULN}, statement(predicates.COSIGN_VULN, {"scanner": {}})),
    ({"type": predicates.COSIGN_VULN}, statement(predicates.COSIGN_VULN, scan("CRITICAL"))),
    (
        REQUIREMENTS[1],
        statement(
            predicates.COSIGN_VULN,
            {"scanner": {"result": {"Results": [{"Vulnerabilities": None}]}}},
        ),
    ),
]


def compiler_accepts(requirement: AttestationRequirement, found: dict[str, Any]) -> bool:
    predicate = found["predicate"]
    if predicates.content_problem(requirement.type, predicate) is not None:
        return False
    if requirement.max_severity and predicates.findings_above(predicate, requirement.max_severity):
        return False
    return not (
        requirement.builder
        and predicates.builder_id(requirement.type, predicate) != requirement.builder.id
    )


@pytest.mark.parametrize(("requirement", "found"), CASES)
def test_admission_decides_like_the_compiler(
    requirement: dict[str, Any], found: dict[str, Any]
) -> None:
    parsed = AttestationRequirement.model_validate(requirement)
    program = cel.NewEnv(variables={"p": cel.Type.DYN}).compile(payload_condition(parsed))
    verdict = program.eval(data={"p": found}).value()
    # an evaluation error (a field absent) denies at admission, as failurePolicy Fail does
    assert (verdict is True) == compiler_accepts(parsed, found)


@pytest.mark.parametrize(("requirement", "found"), CASES)
def test_policy_controller_rego_decides_like_the_compiler(
    requirement: dict[str, Any], found: dict[str, Any]
) -> None:
    """The ClusterImagePolicy's Rego, run by a real Rego engine (rego-cpp, `regopy`) on the same
    statements: compliant exactly where the compiler accepts. policy-controller runs OPA; rego-cpp
    answers `undefined` where OPA answers the default `false`, and both deny."""
    from regopy import Input, Interpreter

    parsed = AttestationRequirement.model_validate(requirement)
    rego = Interpreter()
    rego.add_module("policy.rego", rego_policy(parsed))
    rego.set_input(Input(found))
    answer = rego.query("data.sigstore.isCompliant")
    assert answer.ok(), str(answer)
    assert (str(answer) == '{"expressions":[true]}') == compiler_accepts(parsed, found), str(answer)
