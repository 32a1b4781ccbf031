"""A signed record of each compile: an in-toto statement over the pipeline YAML, and its checks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.verifier import (
    IN_TOTO_PAYLOAD_TYPE,
    KeylessAdvice,
    SignatureError,
    _first_line,
    _parse_bundle_json,
    verify_keyless_dsse,
)

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile
    from secureml.supplychain.identity import TrustedIdentity

PREDICATE_TYPE = "https://secureml.dev/compile/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
UNVERIFIED = "unverified"
PASS = "pass"
SIGNATURE_RULES = ("image.signature-missing", "image.signature-invalid", "image.signer-untrusted")
IMAGE_CHECK_RULE = "image.no-launcher"


class PipelineNotVerifiedError(SecuremlError):
    """The attestation's signature verified, but what it records does not admit this pipeline."""

    exit_code = 1


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def checked_rules(
    profile: TenantProfile, report: dict[str, Any], *, signatures: bool, image_checks: bool
) -> list[dict[str, str]]:
    """Every rule a compliant compile checked, each with its result (`pass`: a compile with any
    violation writes no YAML, hence no attestation). `source` says which check ran it."""
    from secureml.compile.rules import RULES

    rules = [{"id": rule, "source": "compile"} for rule in RULES]
    if signatures:
        rules += [{"id": rule, "source": "signature"} for rule in SIGNATURE_RULES]
    rules += _attestation_rules(profile)
    if image_checks:
        rules.append({"id": IMAGE_CHECK_RULE, "source": "image-check"})
    if report.get("admissionChecked"):
        from secureml.rules import rules_for_profile

        rules += [{"id": rule.id, "source": "admission"} for rule in rules_for_profile(profile)]
    return [{**rule, "result": PASS} for rule in rules]


def _attestation_rules(profile: TenantProfile) -> list[dict[str, str]]:
    """The rules of `images.attestations` (checked whenever the profile lists any); the severity
    and builder rules only where a requirement sets `maxSeverity` or `builder`."""
    requirements = profile.spec.images.attestations
    if not requirements:
        return []
    from secureml.supplychain.attestations import RULES as ATTESTATION_RULES

    kinds = ["missing", "predicate", "invalid", "untrusted"]
    if any(r.max_severity is not None for r in requirements):
        kinds.append("severity")
    if any(r.builder is not None for r in requirements):
        kinds.append("builder")
    return [{"id": ATTESTATION_RULES[kind], "source": "attestation"} for kind in kinds]


def _images(report: dict[str, Any], signatures: bool) -> list[dict[str, Any]]:
    """One entry per distinct step image: its digest, the steps that run it, who signed it."""
    by_image: dict[str, dict[str, Any]] = {}
    for step in report["steps"]:
        image = step.get("image") or ""
        if not image:
            continue
        entry = by_image.get(image)
        if entry is None:
            try:
                digest = ImageRef.parse(image).digest
            except SecuremlError:
                digest = None
            signed = step.get("signature") if signatures else None
            entry = {
                "image": image,
                "digest": digest,
                "signer": signed["signer"] if signed else UNVERIFIED,
                "issuer": signed["issuer"] if signed else None,
                "steps": [],
            }
            by_image[image] = entry
        entry["steps"].append(step["task"])
    return list(by_image.values())


def compile_statement(
    *,
    pipeline_yaml: bytes,
    output_name: str,
    profile_bytes: bytes,
    profile_file: str,
    profile: TenantProfile,
    report: dict[str, Any],
    rules: Sequence[dict[str, str]],
    signatures: bool,
) -> dict[str, Any]:
    """The in-toto statement of one compliant compile (the schema is in docs/supply-chain.md)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": output_name, "digest": {"sha256": sha256_hex(pipeline_yaml)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "pipeline": report["pipeline"],
            "result": report["result"],
            "admissionChecked": bool(report.get("admissionChecked")),
            "profile": {
                "name": profile.metadata.name,
                "namespace": profile.spec.namespace,
                "file": Path(profile_file).name,
                "sha256": sha256_hex(profile_bytes),
            },
            "signaturesChecked": signatures,
            "rules": list(rules),
            "images": _images(report, signatures),
            "compiler": {
                "secureml": _package_version("secureml"),
                "kfp": _package_version("kfp"),
            },
        },
    }


def statement_bytes(statement: dict[str, Any]) -> bytes:
    """The DSSE payload: the statement as sorted, compact JSON."""
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


# --- verification --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifiedPipeline:
    """An attestation that admits the pipeline: who signed it, and what the compile recorded."""

    digest: str  # sha256:<hex> of the pipeline YAML
    signer: str  # certificate subject, or "key sha256:<fingerprint>"
    issuer: str | None  # OIDC issuer; None for a key
    predicate: dict[str, Any]
    profile_checked: bool

    @property
    def rules_passed(self) -> int:
        return len(self.predicate["rules"])


def verify_pipeline(
    pipeline_yaml: bytes,
    attestation: bytes,
    *,
    key_pem: bytes | None = None,
    identities: Sequence[TrustedIdentity] = (),
    trusted_root: str | Path = "production",
    online: bool = False,
    current_profile: bytes | None = None,
    pipeline_name: str = "pipeline",
    attestation_source: str = "attestation",
    key_source: str = "key",
    profile_source: str = "profile",
) -> VerifiedPipeline:
    """Verify `attestation` for `pipeline_yaml`: by key (`key_pem`) or by signer identity against
    `trusted_root` (`online`: refreshed through TUF). The subject's name is not compared (a file
    may be renamed); its digest binds the record to these bytes."""
    digest = sha256_hex(pipeline_yaml)
    subject = f"{pipeline_name} (sha256:{digest})"
    payload_type, payload, signer, issuer = _verified_payload(
        attestation,
        key_pem,
        identities,
        (trusted_root, online),
        subject=subject,
        source=attestation_source,
        key_source=key_source,
    )
    statement, failures = _read_statement(payload_type, payload)
    predicate: dict[str, Any] = {}
    if statement is not None:
        failures += _subject_failures(statement, digest)
        predicate_type = statement.get("predicateType")
        if predicate_type != PREDICATE_TYPE:
            failures.append(f"predicate type is {predicate_type!r}, not {PREDICATE_TYPE!r}")
        else:
            found = statement.get("predicate")
            predicate = found if isinstance(found, dict) else {}
            failures += _predicate_failures(predicate, current_profile, profile_source)
    if failures:
        raise PipelineNotVerifiedError(
            f"{subject}: the attestation does not admit this pipeline",
            why="; ".join(failures),
            fix="recompile the pipeline with `secureml compile --attest` against the current profile",
            where=attestation_source,
        )
    return VerifiedPipeline(
        digest=f"sha256:{digest}",
        signer=signer,
        issuer=issuer,
        predicate=predicate,
        profile_checked=current_profile is not None,
    )


def _verified_payload(
    attestation: bytes,
    key_pem: bytes | None,
    identities: Sequence[TrustedIdentity],
    root: tuple[str | Path, bool],
    *,
    subject: str,
    source: str,
    key_source: str,
) -> tuple[str, bytes, str, str | None]:
    """The DSSE payload once its signature verified: (payload type, payload, signer, issuer)."""
    document = _parse_bundle_json(attestation, source)
    if "dsseEnvelope" not in document:
        raise SignatureError(
            "invalid",
            f"{subject}: {source} is not an attestation",
            why="the bundle has no DSSE envelope (a plain signature records nothing about the compile)",
            fix="pass the file `secureml compile --attest` wrote",
            where=source,
        )
    issuer: str | None
    if key_pem is not None:
        from secureml.supplychain.dsse_key import verify_envelope

        payload_type, payload, fingerprint = verify_envelope(
            document, key_pem, key_source=key_source, subject=subject, where=source
        )
        signer, issuer = f"key {fingerprint}", None
    else:
        material = document.get("verificationMaterial")
        if isinstance(material, dict) and "publicKey" in material:
            raise SignatureError(
                "invalid",
                f"{subject}: the attestation is signed with a key",
                why="its verification material is a public key hint, not a Fulcio certificate",
                fix="verify it with --key PUBLIC_KEY.pem",
                where=source,
            )
        payload_type, payload, signer, issuer = _verify_keyless(
            attestation, identities, root, subject, source
        )
    return payload_type, payload, signer, issuer


def _verify_keyless(
    attestation: bytes,
    identities: Sequence[TrustedIdentity],
    root: tuple[str | Path, bool],
    subject: str,
    source: str,
) -> tuple[str, bytes, str, str]:
    """sigstore-python's DSSE verification (certificate chain, SCT, log entry) and the signer."""
    from secureml.supplychain.trust import verifier_for

    return verify_keyless_dsse(
        attestation,
        identities,
        verifier_for(root[0], online=root[1]),
        subject=subject,
        whose="the attestation's ",
        where=source,
        advice=KeylessAdvice(
            unusable="use the .sigstore.json bundle compile --attest wrote",
            untrusted="trust the identity of the CI job that compiles pipelines "
            "(--certificate-identity[-regexp], --certificate-oidc-issuer)",
            invalid="use the attestation written when this pipeline was compiled, and the "
            "trusted root of the instance that signed it",
        ),
    )


def _read_statement(payload_type: str, payload: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        return None, [f"DSSE payload type is {payload_type!r}, not {IN_TOTO_PAYLOAD_TYPE!r}"]
    try:
        statement = json.loads(payload)
    except ValueError as err:
        return None, [f"the statement is not JSON: {_first_line(err)}"]
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        return None, [f"the payload is not an in-toto statement ({STATEMENT_TYPE})"]
    return statement, []


def _subject_failures(statement: dict[str, Any], digest: str) -> list[str]:
    subjects = statement.get("subject")
    found = (
        [
            s["digest"].get("sha256")
            for s in subjects or []
            if isinstance(s, dict) and isinstance(s.get("digest"), dict)
        ]
        if isinstance(subjects, list)
        else []
    )
    if digest in found:
        return []
    listed = ", ".join(f"sha256:{d}" for d in found if isinstance(d, str)) or "none"
    return [
        f"subject digest mismatch: the attestation is for {listed}, the pipeline YAML is "
        f"sha256:{digest} (the YAML changed after it was compiled)"
    ]


def _predicate_failures(
    predicate: dict[str, Any], current_profile: bytes | None, profile_source: str
) -> list[str]:
    failures: list[str] = []
    profile = predicate.get("profile")
    rules = predicate.get("rules")
    if not isinstance(profile, dict) or not isinstance(rules, list) or not rules:
        return ["the predicate is not a secureml compile record (no profile, or no rules)"]
    if predicate.get("result") != "compliant":
        failures.append(f"the compile result is {predicate.get('result')!r}, not 'compliant'")
    failed = [
        f"{r.get('id')}={r.get('result')}"
        for r in rules
        if not isinstance(r, dict) or r.get("result") != PASS
    ]
    if failed:
        failures.append(f"rules not passed: {', '.join(str(f) for f in failed)}")
    if current_profile is not None:
        recorded, current = profile.get("sha256"), sha256_hex(current_profile)
        if recorded != current:
            failures.append(
                f"profile mismatch: compiled against {profile.get('name')!r} sha256:{recorded}, "
                f"the current profile {profile_source} is sha256:{current}"
            )
    return failures
