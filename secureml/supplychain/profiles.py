"""Signed TenantProfiles: the profile file's exact bytes, signed like any blob with Sigstore."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from secureml.profile.model import read_profile_bytes

if TYPE_CHECKING:  # imported by the check itself: `compile` needs only the bundle's default path
    from secureml.supplychain.identity import TrustedIdentity
    from secureml.supplychain.verifier import SignatureVerifier, VerifiedSignature


def default_profile_bundle(profile_path: Path) -> Path:
    """Where a profile's bundle lives unless given: beside it, `<profile file>.sigstore.json`."""
    return profile_path.with_name(profile_path.name + ".sigstore.json")


def verify_signed_profile(
    profile_path: Path,
    bundle_path: Path | None,
    identities: Sequence[TrustedIdentity],
    trusted_root: str | Path = "production",
    *,
    content: bytes | None = None,
    verifier: SignatureVerifier | None = None,
    bundle_flag: str = "--profile-bundle",
) -> VerifiedSignature:
    """Verify the profile's bytes; raise SignatureError (rule prefix `profile`) on any failure.

    Pass `content` when the caller goes on to parse those same bytes, so that the profile that is
    used is exactly the one that was verified (no second read of a file that may have changed).
    `bundle_flag` is the calling command's option for the bundle path, named in the fix.
    """
    from secureml.supplychain.verifier import SignatureError, SignatureVerifier

    bundle_path = bundle_path or default_profile_bundle(profile_path)
    if content is None:
        content = read_profile_bytes(profile_path)
    try:
        bundle = bundle_path.read_bytes()
    except OSError:
        raise SignatureError(
            "missing",
            f"profile {profile_path} has no signature bundle at {bundle_path}",
            why="a signed profile is required, so an unsigned or locally edited one is refused",
            fix="fetch the profile together with its .sigstore.json bundle from the platform team, "
            f"or pass {bundle_flag}",
        ) from None
    verifier = verifier or SignatureVerifier(trusted_root)
    try:
        return verifier.verify_artifact(
            content,
            bundle,
            identities,
            bundle_source=str(bundle_path),
            artifact_name=f"profile {profile_path}",
        )
    except SignatureError as err:
        if err.kind == "invalid":
            raise SignatureError(
                "invalid",
                err.what,
                why=err.why + " — the profile may have been changed after it was signed",
                fix="use the profile exactly as the platform team published it",
                where=err.where,
            ) from None
        raise
