"""What `spec.images.attestations` may ask for: options only where their predicate has them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from secureml.profile.predicates import COSIGN_VULN, PROVENANCE_TYPES


def attestation_problems(
    requirements: Sequence[Any], image_signers: Sequence[Any]
) -> list[tuple[str, str]]:
    """`(yaml path, message)` for each requirement that cannot be checked as written."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for index, requirement in enumerate(requirements):
        path = f"spec.images.attestations[{index}]"
        if requirement.type in seen:
            problems.append(
                (
                    f"{path}.type",
                    f"{requirement.type} is already required by attestations[{seen[requirement.type]}]; "
                    "give each predicate type once",
                )
            )
        seen.setdefault(requirement.type, index)
        if requirement.max_severity is not None and requirement.type != COSIGN_VULN:
            problems.append(
                (
                    f"{path}.maxSeverity",
                    f"maxSeverity reads the findings of a {COSIGN_VULN} scan (Trivy "
                    f"--format cosign-vuln), not of {requirement.type}; remove it or change the type",
                )
            )
        if requirement.builder is not None and requirement.type not in PROVENANCE_TYPES:
            problems.append(
                (
                    f"{path}.builder",
                    f"builder applies to SLSA provenance ({', '.join(PROVENANCE_TYPES)}), "
                    f"not to {requirement.type}; remove it or change the type",
                )
            )
        if not requirement.identities and not image_signers:
            problems.append(
                (
                    f"{path}.identities",
                    "nobody is trusted to sign this attestation: list identities here "
                    "or under images.signatures.identities",
                )
            )
    return problems
