"""Image signature checks for `secureml compile`: one result per step, each digest verified once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.identity import TrustedIdentity, identities_from_profile
from secureml.supplychain.image_bundles import candidate_bundles, verify_with_bundles
from secureml.supplychain.verifier import SignatureError, SignatureVerifier, VerifiedSignature

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile


@dataclass(frozen=True, slots=True)
class ImageVerification:
    """The signature check of one step's image."""

    step: str
    image: str
    verified: bool
    signer: str | None = None  # certificate subject, e.g. a GitHub workflow URI
    issuer: str | None = None  # OIDC issuer
    kind: str | None = None  # "dsse" (cosign v3) or "message-signature"
    bundle: str | None = None  # where the bundle that decided came from
    rule: str | None = None  # set when not verified
    message: str | None = None  # what went wrong, and why
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def verify_images_for_compile(
    steps: Sequence[tuple[str, str]],
    profile: TenantProfile,
    bundles_dir: Path | None,
    fetch: bool = False,
    *,
    profile_dir: Path | None = None,
    verifier: SignatureVerifier | None = None,
) -> list[ImageVerification]:
    """Verify every step's image against the profile's trusted identities (docs/supply-chain.md).

    `profile_dir` resolves a relative `spec.images.signatures.trustedRoot`; `verifier` lets a caller
    reuse a warm verifier (it must use the profile's trusted root).
    """
    signatures = profile.spec.images.signatures
    verifier = verifier or SignatureVerifier(signatures.trusted_root, base_dir=profile_dir)
    identities = identities_from_profile(profile)
    decided: dict[str, ImageVerification] = {}
    results: list[ImageVerification] = []
    for step, image in steps:
        try:
            ref = ImageRef.parse(image)
        except SecuremlError as err:
            results.append(
                _failed(
                    step, image, SignatureError("missing", err.what, why=err.why, fix=err.fix), None
                )
            )
            continue
        key = ref.by_digest() if ref.pinned else str(ref)
        if key not in decided:
            decided[key] = _verify_one(ref, verifier, identities, bundles_dir, fetch)
        outcome = decided[key]
        results.append(
            ImageVerification(
                **{**outcome.to_dict(), "step": step, "image": image, "verified": outcome.verified}
            )
        )
    return results


def _verify_one(
    ref: ImageRef,
    verifier: SignatureVerifier,
    identities: list[TrustedIdentity],
    bundles_dir: Path | None,
    fetch: bool,
) -> ImageVerification:
    try:
        candidates = candidate_bundles(ref, bundles_dir, fetch)
    except SignatureError as err:
        return _failed("", str(ref), err, None)
    outcome = verify_with_bundles(ref, candidates, verifier, identities)
    if outcome.signed is not None:
        assert outcome.source is not None
        return _passed(str(ref), outcome.signed, outcome.source)
    assert outcome.failure is not None
    return _failed("", str(ref), outcome.failure, outcome.source)


def _passed(image: str, signed: VerifiedSignature, source: str) -> ImageVerification:
    return ImageVerification(
        step="",
        image=image,
        verified=True,
        signer=signed.signer,
        issuer=signed.issuer,
        kind=signed.kind,
        bundle=source,
    )


def _failed(step: str, image: str, err: SignatureError, source: str | None) -> ImageVerification:
    message = err.what + (f": {err.why}" if err.why else "")
    return ImageVerification(
        step=step,
        image=image,
        verified=False,
        bundle=source,
        rule=err.rule("image"),
        message=message,
        fix=err.fix or None,
    )


def verify_attestations_for_compile(
    steps: Sequence[tuple[str, str]],
    profile: TenantProfile,
    bundles_dir: Path | None,
    fetch: bool = False,
    *,
    profile_dir: Path | None = None,
    verifier: SignatureVerifier | None = None,
) -> list[ImageVerification]:
    """One failed `ImageVerification` per step and unmet `spec.images.attestations` requirement
    (rules in `supplychain.attestations.RULES`); none when every image meets every requirement.

    Each distinct digest is checked once. The registry is read (with `fetch`) only for an image
    the `--bundles` files leave a requirement unmet for; one that does not answer raises
    `NetworkError`.
    """
    requirements = profile.spec.images.attestations
    if not requirements:
        return []
    from secureml.supplychain.attestations import (
        AttestationFailure,
        attestation_files,
        check_requirements,
        registry_candidates,
    )

    signatures = profile.spec.images.signatures
    verifier = verifier or SignatureVerifier(signatures.trusted_root, base_dir=profile_dir)
    signers = identities_from_profile(profile)
    decided: dict[str, list[AttestationFailure]] = {}
    results: list[ImageVerification] = []
    for step, image in steps:
        try:
            ref = ImageRef.parse(image)
        except SecuremlError:
            continue  # the signature and admission checks report a malformed reference
        if ref.digest_hex is None:
            results.append(
                ImageVerification(
                    step,
                    image,
                    False,
                    rule="image.attestation-missing",
                    message=f"image {ref} is not pinned by digest: attestations are about a digest",
                    fix="reference the image as REPOSITORY@sha256:<digest>",
                )
            )
            continue
        key = ref.by_digest()
        if key not in decided:
            candidates = attestation_files(bundles_dir, ref.digest_hex) if bundles_dir else []
            looked = f"in {bundles_dir}" if bundles_dir else "nowhere (no --bundles, no fetching)"
            failures = check_requirements(ref, candidates, requirements, verifier, signers, looked)
            if failures and fetch:
                candidates += registry_candidates(ref)
                looked += " and in the registry" if bundles_dir else ""
                looked = "in the registry" if not bundles_dir else looked
                failures = check_requirements(
                    ref, candidates, requirements, verifier, signers, looked
                )
            decided[key] = failures
        results += [
            ImageVerification(
                step,
                image,
                False,
                bundle=failure.source,
                rule=failure.rule,
                message=failure.message,
                fix=failure.fix,
            )
            for failure in decided[key]
        ]
    return results
