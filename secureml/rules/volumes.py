"""Rules on volumes Pod Security's restricted level admits but the tenant's controls do not see."""

from __future__ import annotations

from secureml.pods.mutation.catalogue import SPIFFE_CSI_DRIVER, SPIFFE_VOLUME
from secureml.profile.model import TenantProfile
from secureml.rules.cel.reference import SPEC, spec_bound, spec_bound_message
from secureml.rules.cel.text import quote
from secureml.rules.imagerefs import pinned, registry_prefixes, tenant_registry
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD


def _rule(profile: TenantProfile, rule_id: str, message: str, ok: str, message_tail: str) -> Rule:
    """A rule that `ok` (over `v`) holds for every volume; the message names the first offender."""
    volumes = f"{SPEC}.volumes"
    return Rule(
        rule_id,
        message,
        spec_bound(f"!has({volumes}) || {volumes}.all(v, {ok})"),
        spec_bound_message(
            f"'volume \"' + {volumes}.filter(v, !({ok}))[0].name + '\" ' + {quote(message_tail)}"
        ),
        (f"profile:{profile.metadata.name}",),
        EVERY_POD,
    )


def csi_volume_rule(profile: TenantProfile) -> Rule:
    ok = (
        f"!has(v.csi) || (v.name == {quote(SPIFFE_VOLUME)} && v.csi.driver == "
        f"{quote(SPIFFE_CSI_DRIVER)} && has(v.csi.readOnly) && v.csi.readOnly == true && "
        "!has(v.csi.volumeAttributes) && !has(v.csi.nodePublishSecretRef) && !has(v.csi.fsType))"
    )
    return _rule(
        profile,
        "secureml.csiVolume",
        f"no inline CSI volume but the platform's {SPIFFE_VOLUME} ({SPIFFE_CSI_DRIVER}, "
        "read-only, no attributes)",
        ok,
        f"is an inline CSI volume; only the platform's {SPIFFE_VOLUME} ({SPIFFE_CSI_DRIVER}) is "
        "allowed",
    )


def image_volume_rule(profile: TenantProfile) -> Rule:
    ref = "v.image.reference"
    checks = [tenant_registry(ref, profile)]
    wanted = f"from {', '.join(registry_prefixes(profile))}"
    if profile.spec.images.require_digest:
        checks.append(pinned(ref))
        wanted += ", pinned by digest (@sha256:<64 hex>)"
    ok = f"!has(v.image) || (has(v.image.reference) && {' && '.join(checks)})"
    return _rule(
        profile,
        "secureml.imageVolume",
        f"an image volume must name an image {wanted}, as container images do",
        ok,
        f"mounts an image that is not {wanted}",
    )


def ephemeral_volume_rule(profile: TenantProfile) -> Rule:
    claim = "v.ephemeral.volumeClaimTemplate"
    ok = (
        f"!has(v.ephemeral) || !has({claim}) || !has({claim}.spec) || !has({claim}.spec.volumeName)"
    )
    return _rule(
        profile,
        "secureml.ephemeralVolume",
        "a generic ephemeral volume gets a new volume: its claim template names no existing "
        "PersistentVolume (volumeName), which could hold another tenant's data",
        ok,
        "binds an existing PersistentVolume by volumeName; remove volumeName so the claim gets a "
        "new volume from its storage class",
    )


def volume_rules(profile: TenantProfile) -> list[Rule]:
    """The volume rules of `profile`."""
    return [csi_volume_rule(profile), image_volume_rule(profile), ephemeral_volume_rule(profile)]
