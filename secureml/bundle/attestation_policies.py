"""The profile's required attestations (`spec.images.attestations`) as admission checks, the same
conditions `secureml compile` checks offline (`supplychain/predicates.py`):

- policy-controller: an `authorities[].attestations` entry with a CUE policy (predicate type,
  CycloneDX `bomFormat`, SPDX `spdxVersion`, the SLSA builder id) or, for a scan's maxSeverity,
  a Rego policy (`package sigstore`, `isCompliant`; written with `import rego.v1`, which OPA has
  read since 0.59 and 1.x requires). policy-controller evaluates both on the verified in-toto
  statement.
- Kyverno `ImageValidatingPolicy`: an `attestations` entry (`intoto.type`) and CEL validations:
  `verifyAttestationSignatures` against the requirement's attestor, and a condition on
  `extractPayload` (the statement) over `p`.

Names: requirement `i` is attestation `att<i>`; one with its own signer identities has its own
attestor `att<i>` (Kyverno) or authority (policy-controller); the others use the image signers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from secureml.supplychain import predicates

if TYPE_CHECKING:
    from secureml.profile import AttestationRequirement, SignerIdentity

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
    """One `authorities[].attestations` entry: predicate type and its CUE or Rego policy."""
    if requirement.max_severity is not None:
        policy = {"type": "rego", "data": vuln_rego(requirement.max_severity)}
    else:
        policy = {"type": "cue", "data": _cue(requirement)}
    return {"name": name(index), "predicateType": requirement.type, "policy": policy}


def _cue(requirement: AttestationRequirement) -> str:
    lines = [f"predicateType: {json.dumps(requirement.type)}"]
    if requirement.type == predicates.CYCLONEDX:
        lines.append('predicate: bomFormat: "CycloneDX"')
    elif requirement.type == predicates.SPDX:
        lines.append('predicate: spdxVersion: =~"^SPDX-"')
    elif requirement.type in predicates.PROVENANCE_TYPES:
        path = (
            "runDetails: builder: id" if requirement.type == predicates.SLSA_V1 else "builder: id"
        )
        wanted = json.dumps(requirement.builder.id) if requirement.builder else "string"
        lines.append(f"predicate: {path}: {wanted}")
    elif requirement.type == predicates.COSIGN_VULN:
        lines.append("predicate: scanner: result: {...}")
    return "\n".join(lines) + "\n"


def vuln_rego(max_severity: str) -> str:
    """Every finding of a cosign vuln scan at a severity `max_severity` allows (fails closed)."""
    allowed = predicates.allowed_severities(max_severity)
    allowed_set = "{" + ", ".join(json.dumps(s) for s in allowed) + "}" if allowed else "set()"
    return (
        "package sigstore\n\n"
        "import rego.v1\n\n"
        "default isCompliant := false\n\n"
        f"allowed := {allowed_set}\n\n"
        "isCompliant if {\n"
        f"\tinput.predicateType == {json.dumps(predicates.COSIGN_VULN)}\n"
        "\tis_object(input.predicate.scanner.result)\n"
        '\tevery target in object.get(input.predicate.scanner.result, "Results", []) {\n'
        '\t\tevery finding in object.get(target, "Vulnerabilities", []) {\n'
        "\t\t\tfinding.Severity in allowed\n"
        "\t\t}\n"
        "\t}\n"
        "}\n"
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
            conditions.append(f"size(string({holder}.id)) > 0")
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
