"""Attestations the profile requires on every image (`spec.images.attestations`), checked offline."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.image_ref import ImageRef
from secureml.profile import predicates
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.image_bundles import Candidate, read_bundle_file
from secureml.supplychain.verifier import COSIGN_SIGN_PREDICATE, SignatureError, SignatureVerifier

if TYPE_CHECKING:
    from secureml.profile.model import AttestationRequirement

RULES = {
    "missing": "image.attestation-missing",
    "predicate": "image.attestation-predicate",
    "invalid": "image.attestation-invalid",
    "untrusted": "image.attestation-untrusted",
    "severity": "image.vuln-severity",
    "builder": "image.provenance-builder",
}
# When every candidate fails: the failure that says most about the attestation that was meant.
_TELLING = ("severity", "builder", "predicate", "untrusted", "invalid", "missing")


@dataclass(frozen=True, slots=True)
class AttestationFailure:
    """One requirement an image does not meet: `kind` (a key of RULES), what, why, fix."""

    kind: str
    predicate_type: str
    message: str
    fix: str
    source: str | None = None

    @property
    def rule(self) -> str:
        return RULES[self.kind]


def attestation_files(bundles_dir: Path, digest_hex: str) -> list[Candidate]:
    """The attestation bundles for `sha256:<digest_hex>` in a `--bundles` folder, by name."""
    found = sorted(Path(bundles_dir).glob(f"sha256-{digest_hex}.*.sigstore.json"))
    return [read_bundle_file(path) for path in found if path.is_file()]


def registry_candidates(ref: ImageRef) -> list[Candidate]:
    """Every bundle the registry lists for the digest; none when it lists none (NetworkError
    when it does not answer)."""
    from secureml.supplychain.registry import fetch_bundles

    try:
        return [(bundle.content, bundle.source) for bundle in fetch_bundles(ref)]
    except SignatureError:
        return []


def claimed_predicate_type(content: bytes) -> str | None:
    """The predicate type a DSSE bundle's statement names, read *before* verification (to pick
    which requirement a bundle is for); None for a message signature or an unreadable bundle."""
    try:
        statement = _statement(content)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    predicate_type = statement.get("predicateType") if isinstance(statement, dict) else None
    return predicate_type if isinstance(predicate_type, str) else None


def check_requirements(
    ref: ImageRef,
    candidates: Sequence[Candidate],
    requirements: Sequence[AttestationRequirement],
    verifier: SignatureVerifier,
    image_signers: Sequence[TrustedIdentity],
    looked: str,
) -> list[AttestationFailure]:
    """The requirements `ref` does not meet with these candidates (`looked` says where they
    came from, for a missing attestation's message)."""
    claimed = [(claimed_predicate_type(content), content, source) for content, source in candidates]
    failures = []
    for requirement in requirements:
        identities = _identities(requirement) or list(image_signers)
        offered = [
            (content, source) for kind, content, source in claimed if kind == requirement.type
        ]
        failed: list[AttestationFailure] = []
        for content, source in offered:
            outcome = _try(ref, requirement, verifier, identities, content, source)
            if outcome is None:
                break  # met
            failed.append(outcome)
        else:
            if failed:
                failures.append(min(failed, key=lambda f: _TELLING.index(f.kind)))
            else:
                others = sorted(
                    {kind for kind, _, _ in claimed if kind and kind != COSIGN_SIGN_PREDICATE}
                )
                failures.append(_absent(ref, requirement, others, looked))
    return failures


def _identities(requirement: AttestationRequirement) -> list[TrustedIdentity]:
    return [
        TrustedIdentity(issuer=i.issuer, subject=i.subject, subject_regexp=i.subject_reg_exp)
        for i in requirement.identities
    ]


def _try(
    ref: ImageRef,
    requirement: AttestationRequirement,
    verifier: SignatureVerifier,
    identities: Sequence[TrustedIdentity],
    content: bytes,
    source: str,
) -> AttestationFailure | None:
    """None when this candidate meets the requirement, else why not."""
    wanted = requirement.type
    try:
        signed = verifier.verify_artifact(
            f"sha256:{ref.digest_hex}",
            content,
            identities,
            bundle_source=source,
            artifact_name=f"{wanted} attestation of image {ref.by_digest()}",
        )
    except SignatureError as err:
        kind = "untrusted" if err.kind == "untrusted" else "invalid"
        return AttestationFailure(
            kind,
            wanted,
            err.what + (f": {err.why}" if err.why else ""),
            "attach the attestation signed for this exact digest by a trusted identity "
            "(cosign attest --new-bundle-format)"
            if kind == "invalid"
            else "sign the attestation with a trusted identity, or (platform team) add its "
            "signer to the requirement's identities",
            source,
        )
    # Verified. The statement is read again from the same bytes, refusing duplicate keys (a parser
    # could pick another value than Sigstore's did); its predicate type is the verified one.
    try:
        statement = _statement(content)
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        statement, why = {}, str(err)
    else:
        why = f"its predicate type is {signed.predicate_type}"
    if signed.predicate_type != wanted or statement.get("predicateType") != wanted:
        return AttestationFailure(
            "invalid",
            wanted,
            f"{source} does not read as one {wanted} statement: {why}",
            "attach the bundle cosign attest wrote, unmodified",
            source,
        )
    predicate = statement.get("predicate")
    problem = predicates.content_problem(wanted, predicate)
    if problem is not None or not isinstance(predicate, dict):
        return AttestationFailure(
            "predicate",
            wanted,
            f"{wanted} attestation of image {ref.by_digest()} is malformed: {problem}",
            f"attest a well-formed {wanted} predicate",
            source,
        )
    if requirement.max_severity is not None:
        above = predicates.findings_above(predicate, requirement.max_severity)
        if above:
            shown = ", ".join(above[:5]) + (f" and {len(above) - 5} more" if len(above) > 5 else "")
            return AttestationFailure(
                "severity",
                wanted,
                f"image {ref.by_digest()} has {len(above)} vulnerabilit"
                f"{'y' if len(above) == 1 else 'ies'} above the allowed {requirement.max_severity}: "
                + shown,
                "rebuild the image with fixed packages and attest a new scan",
                source,
            )
    if requirement.builder is not None:
        built_by = predicates.builder_id(wanted, predicate)
        if built_by != requirement.builder.id:
            return AttestationFailure(
                "builder",
                wanted,
                f"image {ref.by_digest()} was built by {built_by}, not by the trusted builder "
                f"{requirement.builder.id}",
                "build the image with the trusted builder, or (platform team) change builder.id",
                source,
            )
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key in a JSON object")
    return dict(pairs)


def _statement(content: bytes) -> dict[str, Any]:
    """The in-toto statement of a DSSE bundle (ValueError and friends when unreadable)."""
    document = json.loads(content, object_pairs_hook=_unique_keys)
    payload = base64.b64decode(document["dsseEnvelope"]["payload"], validate=True)
    statement = json.loads(payload, object_pairs_hook=_unique_keys)
    if not isinstance(statement, dict):
        raise TypeError("the statement is not a JSON object")
    return statement


def _absent(
    ref: ImageRef, requirement: AttestationRequirement, others: list[str], looked: str
) -> AttestationFailure:
    wanted = requirement.type
    family = predicates.family(wanted)
    related = [t for t in others if family is not None and predicates.family(t) == family]
    if related:
        return AttestationFailure(
            "predicate",
            wanted,
            f"image {ref.by_digest()} has a {family} attestation of type {', '.join(related)}, "
            f"not the required {wanted}",
            f"attest a {wanted} predicate, or (platform team) require {related[0]} in the profile",
        )
    found = f"; the image has attestations of type {', '.join(others)}" if others else ""
    return AttestationFailure(
        "missing",
        wanted,
        f"no {wanted} attestation for image {ref.by_digest()}: looked {looked}{found}",
        f"attach it (cosign attest --new-bundle-format --type ...) to the image, or put it at "
        f"DIR/sha256-{ref.digest_hex}.<name>.sigstore.json and pass --bundles DIR",
    )
