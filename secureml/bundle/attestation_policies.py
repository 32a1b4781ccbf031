"""The profile's required attestations as admission checks (policy-controller Rego, Kyverno CEL)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from secureml.profile import predicates

if TYPE_CHECKING:
    from secureml.profile.model import AttestationRequirement, SignerIdentity

Manifest = dict[str, Any]


def name(index: int) -> str:
    """The attestation's name in both engines (a CEL identifier, a Kubernetes name part)."""
    return f"att{index}"


def identity_manifests(identities: Sequence[SignerIdentity]) -> list[Manifest]:
    """Keyless identities as both engines spell them: issuer and subject or subjectRegExp."""
    out: list[Manifest] = []
    for identity in identities:
        entry: Manifest = {"issuer": identity.issuer}
        if identity.subject is not None:
            entry["subject"] = identity.subject
        else:
            entry["subjectRegExp"] = identity.subject_reg_exp
        out.append(entry)
    return out


# --- policy-controller ---------------------------------------------------------------------------


def policy_controller_attestation(index: int, requirement: AttestationRequirement) -> Manifest:
    """One `authorities[].attestations` entry: the predicate type and its Rego policy.

    Rego, never CUE: policy-controller validates a CUE policy unified with the statement without
    requiring concrete values, so a field the statement leaves out (a builder id, a bomFormat)
    passes a CUE constraint on it; a Rego rule that reads an absent field is simply not true.
    """
    policy = {"type": "rego", "data": rego_policy(requirement)}
    return {"name": name(index), "predicateType": requirement.type, "policy": policy}


def rego_policy(requirement: AttestationRequirement) -> str:
    """`data.sigstore.isCompliant` over the verified statement (`input`), what policy-controller
    queries; false unless every condition holds."""
    conditions = [f"input.predicateType == {json.dumps(requirement.type)}"]
    prelude = ""
    if requirement.type == predicates.CYCLONEDX:
        conditions.append('input.predicate.bomFormat == "CycloneDX"')
    elif requirement.type == predicates.SPDX:
        conditions.append('startswith(input.predicate.spdxVersion, "SPDX-")')
    elif requirement.type in predicates.PROVENANCE_TYPES:
        holder = (
            "input.predicate.runDetails.builder"
            if requirement.type == predicates.SLSA_V1
            else "input.predicate.builder"
        )
        if requirement.builder is not None:
            conditions.append(f"{holder}.id == {json.dumps(requirement.builder.id)}")
        else:
            conditions += [f"is_string({holder}.id)", f'{holder}.id != ""']
    elif requirement.type == predicates.COSIGN_VULN:
        conditions.append("is_object(input.predicate.scanner.result)")
        if requirement.max_severity is not None:
            allowed = predicates.allowed_severities(requirement.max_severity)
            listed = ", ".join(json.dumps(s) for s in allowed)
            prelude = f"allowed := {{{listed}}}\n\n" if allowed else "allowed := set()\n\n"
            conditions.append(
                'every target in object.get(input.predicate.scanner.result, "Results", []) {\n'
                '\t\tevery finding in object.get(target, "Vulnerabilities", []) {\n'
                "\t\t\tfinding.Severity in allowed\n"
                "\t\t}\n"
                "\t}"
            )
    body = "".join(f"\t{condition}\n" for condition in conditions)
    return (
        "package sigstore\n\n"
        "import rego.v1\n\n"
        "default isCompliant := false\n\n"
        f"{prelude}isCompliant if {{\n{body}}}\n"
    )


# --- Kyverno ------------------------------------------------------------------------------------


def kyverno_attestation(index: int, requirement: AttestationRequirement) -> Manifest:
    return {"name": name(index), "intoto": {"type": requirement.type}}


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def payload_condition(requirement: AttestationRequirement) -> str:
    """A CEL condition on the verified statement `p` (Kyverno's `extractPayload`)."""
    conditions = [f"p.predicateType == {_cel_string(requirement.type)}"]
    if requirement.type == predicates.CYCLONEDX:
        conditions.append("p.predicate.bomFormat == 'CycloneDX'")
    elif requirement.type == predicates.SPDX:
        conditions.append("string(p.predicate.spdxVersion).startsWith('SPDX-')")
    elif requirement.type in predicates.PROVENANCE_TYPES:
        holder = (
            "p.predicate.runDetails.builder"
            if requirement.type == predicates.SLSA_V1
            else "p.predicate.builder"
        )
        if requirement.builder is not None:
            conditions.append(f"{holder}.id == {_cel_string(requirement.builder.id)}")
        else:
            conditions.append(f"type({holder}.id) == string && size({holder}.id) > 0")
    elif requirement.type == predicates.COSIGN_VULN:
        conditions.append("type(p.predicate.scanner.result) == map")
    if requirement.max_severity is not None:
        allowed = (
            "["
            + ", ".join(
                _cel_string(s) for s in predicates.allowed_severities(requirement.max_severity)
            )
            + "]"
        )
        result = "p.predicate.scanner.result"
        conditions.append(
            f"(!has({result}.Results) || {result}.Results.all(r, "
            f"!has(r.Vulnerabilities) || r.Vulnerabilities.all(v, v.Severity in {allowed})))"
        )
    return " && ".join(conditions)


def kyverno_validations(
    index: int, requirement: AttestationRequirement, attestor: str
) -> list[Manifest]:
    """The requirement's two validations: a trusted signature, and what the statement says."""
    attestation = f"attestations.{name(index)}"
    return [
        {
            "expression": f"images.all.map(image, verifyAttestationSignatures(image, {attestation}, "
            f"[attestors.{attestor}])).all(n, n > 0)",
            "message": f"every image from the tenant's registries must carry a {requirement.type} "
            "attestation signed by a trusted identity",
        },
        {
            "expression": f"images.all.map(image, extractPayload(image, {attestation}))"
            f".all(p, {payload_condition(requirement)})",
            "message": f"the {requirement.type} attestation does not meet the profile"
            + (f" (findings above {requirement.max_severity})" if requirement.max_severity else "")
            + (f" (builder {requirement.builder.id})" if requirement.builder else ""),
        },
    ]
