"""The in-toto predicates a profile can require on images, and what each one's content must say.

Plain data and checks on parsed JSON (no Sigstore import), shared by profile, compiler and bundle.
"""

from __future__ import annotations

from typing import Any

CYCLONEDX = "https://cyclonedx.org/bom"
SPDX = "https://spdx.dev/Document"
COSIGN_VULN = "https://cosign.sigstore.dev/attestation/vuln/v1"
INTOTO_VULNS = "https://in-toto.io/attestation/vulns/v0.1"
SLSA_V1 = "https://slsa.dev/provenance/v1"
SLSA_V02 = "https://slsa.dev/provenance/v0.2"

SBOM_TYPES = (CYCLONEDX, SPDX)
VULN_TYPES = (COSIGN_VULN, INTOTO_VULNS)
PROVENANCE_TYPES = (SLSA_V1, SLSA_V02)

# `maxSeverity` -> the finding severities it allows. A level not listed (UNKNOWN, or anything a
# scanner invents) counts as CRITICAL: it fails closed, except under maxSeverity CRITICAL.
_RANKED = ("LOW", "MEDIUM", "HIGH", "CRITICAL")


def allowed_severities(max_severity: str) -> list[str]:
    """The finding severities `max_severity` admits (NONE: none; CRITICAL: all, UNKNOWN too)."""
    if max_severity == "NONE":
        return []
    allowed = list(_RANKED[: _RANKED.index(max_severity) + 1])
    return [*allowed, "UNKNOWN"] if max_severity == "CRITICAL" else allowed


def family(predicate_type: str) -> str | None:
    """`sbom`, `vuln` or `provenance` for the types this module knows; None for any other."""
    for name, types in (
        ("sbom", SBOM_TYPES),
        ("vuln", VULN_TYPES),
        ("provenance", PROVENANCE_TYPES),
    ):
        if predicate_type in types:
            return name
    return None


def content_problem(predicate_type: str, predicate: Any) -> str | None:
    """Why `predicate` is not a predicate of `predicate_type`, or None when it reads as one.

    Only what the later checks rely on is required (fail closed where they could not decide).
    """
    if not isinstance(predicate, dict):
        return "the predicate is not a JSON object"
    if predicate_type == CYCLONEDX and predicate.get("bomFormat") != "CycloneDX":
        return "the predicate is not a CycloneDX BOM (bomFormat is not 'CycloneDX')"
    if predicate_type == SPDX and not str(predicate.get("spdxVersion", "")).startswith("SPDX-"):
        return "the predicate is not an SPDX document (no spdxVersion 'SPDX-...')"
    if predicate_type == COSIGN_VULN:
        scanner = predicate.get("scanner")
        result = scanner.get("result") if isinstance(scanner, dict) else None
        if not isinstance(result, dict):
            return "the scan has no report (predicate.scanner.result is not an object)"
        if _findings(result) is None:
            return "the scan report is unreadable (Results[].Vulnerabilities[] are not objects)"
    if predicate_type in PROVENANCE_TYPES and builder_id(predicate_type, predicate) is None:
        return "the provenance names no builder (builder.id)"
    return None


def _findings(result: dict[str, Any]) -> list[dict[str, Any]] | None:
    results = result.get("Results", [])
    if not isinstance(results, list):
        return None
    found: list[dict[str, Any]] = []
    for target in results:
        if not isinstance(target, dict):
            return None
        vulnerabilities = target.get("Vulnerabilities", [])  # Trivy leaves it out when empty
        if not isinstance(vulnerabilities, list) or not all(
            isinstance(v, dict) for v in vulnerabilities
        ):
            return None
        found += vulnerabilities
    return found


def findings_above(predicate: dict[str, Any], max_severity: str) -> list[str]:
    """`ID (SEVERITY)` of each finding of a cosign vuln scan that `max_severity` does not allow."""
    allowed = allowed_severities(max_severity)
    findings = _findings(predicate["scanner"]["result"]) or []
    return [
        f"{finding.get('VulnerabilityID', '(no id)')} ({finding.get('Severity', 'no severity')})"
        for finding in findings
        if finding.get("Severity") not in allowed
    ]


def builder_id(predicate_type: str, predicate: dict[str, Any]) -> str | None:
    """The provenance's builder id: SLSA v1 `runDetails.builder.id`, v0.2 `builder.id`."""
    holder: Any = predicate
    path = ("runDetails", "builder", "id") if predicate_type == SLSA_V1 else ("builder", "id")
    for key in path:
        holder = holder.get(key) if isinstance(holder, dict) else None
    return holder if isinstance(holder, str) and holder else None
