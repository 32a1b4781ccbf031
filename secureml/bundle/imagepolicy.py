"""Image signature policy: Sigstore policy-controller `ClusterImagePolicy` or Kyverno
`ImageValidatingPolicy`.
"""

from __future__ import annotations

from pathlib import Path

from secureml.bundle import attestation_policies as attest
from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    pod_match_constraints,
    tenant_labels,
)
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.core.image_ref import REFERENCE_SUFFIX_STARTS
from secureml.profile.model import TenantProfile

PUBLIC_GOOD = {"fulcio": "https://fulcio.sigstore.dev", "rekor": "https://rekor.sigstore.dev"}
STAGING = {"fulcio": "https://fulcio.sigstage.dev", "rekor": "https://rekor.sigstage.dev"}
STAGING_TUF_MIRROR = "https://tuf-repo-cdn.sigstage.dev"
# The policy-controller TrustRoot the platform team creates for the staging instance.
STAGING_TRUST_ROOT = "sigstore-staging"


def registry_globs(profile: TenantProfile) -> list[str]:
    """Globs for the tenant's registries; entries match whole path segments (secureml.core.image_ref)."""
    return sorted({entry.rstrip("/") + "/**" for entry in profile.spec.images.allowed_registries})


def system_image_globs() -> list[str]:
    """KFP/Argo repositories, any tag or digest: the references `rules.scope.system_image` admits.

    policy-controller matches a glob against the fully qualified reference (an untagged image reads
    as `:latest`), `*` never crossing a `/`: `REPO:*` and `REPO@*` are exactly the tags and digests
    of `REPO`, never `REPO-debug` or `REPOx` (which a bare `REPO*` would let through unsigned).
    """
    return sorted(
        f"{repository}{start}*"
        for repository in contract.KFP_SYSTEM_IMAGES
        for start in REFERENCE_SUFFIX_STARTS
    )


def _identities(profile: TenantProfile) -> list[Manifest]:
    """The trusted signers (the profile refuses `required` signatures without any)."""
    return attest.identity_manifests(profile.spec.images.signatures.identities)


def _policy_controller_authority(
    profile: TenantProfile, identities: list[Manifest] | None = None
) -> Manifest:
    """The tenant's keyless authority: the image signers, or `identities` (an attestation's)."""
    root = profile.spec.images.signatures.trusted_root
    keyless: Manifest = {"identities": _identities(profile) if identities is None else identities}
    ctlog: Manifest = {}
    if root == "production":
        keyless["url"] = PUBLIC_GOOD["fulcio"]
        ctlog["url"] = PUBLIC_GOOD["rekor"]
    else:
        # A TrustRoot object the platform team creates (policy.sigstore.dev TrustRoot).
        trust_root = (
            STAGING_TRUST_ROOT if root == "staging" else cluster_name(profile, "trust-root")
        )
        urls = STAGING if root == "staging" else None
        keyless["trustRootRef"] = trust_root
        ctlog["trustRootRef"] = trust_root
        if urls:
            keyless["url"] = urls["fulcio"]
            ctlog["url"] = urls["rekor"]
    return {
        "name": "tenant-signers",
        "keyless": keyless,
        "ctlog": ctlog,
        "signatureFormat": "bundle",
    }


def render_cluster_image_policies(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    signatures = profile.spec.images.signatures
    policies = []
    globs = registry_globs(profile)
    if globs:
        authority = (
            _policy_controller_authority(profile)
            if signatures.required
            else {"name": "unsigned-allowed", "static": {"action": "pass"}}
        )
        policies.append(
            {
                "apiVersion": "policy.sigstore.dev/v1beta1",
                "kind": "ClusterImagePolicy",
                "metadata": {
                    "name": cluster_name(profile, "images"),
                    "labels": tenant_labels(profile),
                },
                "spec": {
                    "mode": "enforce",
                    "images": [{"glob": glob} for glob in globs],
                    # Cluster-wide object: only this tenant's step pods are held to its signers.
                    "match": [
                        {
                            "group": "",
                            "version": "v1",
                            "resource": "pods",
                            "selector": {
                                "matchLabels": {contract.LABEL_TENANT: profile.metadata.name}
                            },
                        }
                    ],
                    "authorities": [authority],
                },
            }
        )
    if globs:
        policies += _attestation_policies(profile)
    policies.append(
        {
            "apiVersion": "policy.sigstore.dev/v1beta1",
            "kind": "ClusterImagePolicy",
            "metadata": {
                "name": cluster_name(profile, "kfp-system-images"),
                "labels": tenant_labels(profile),
            },
            "spec": {
                "mode": "enforce",
                "images": [{"glob": glob} for glob in system_image_globs()],
                "authorities": [{"name": "kfp-system", "static": {"action": "pass"}}],
            },
        }
    )
    runtime = profile.spec.runtime.image
    if runtime is not None:
        # The platform's runtime image (issue 10, class 9), by its exact digest: the platform
        # team's pin in the profile is the trust decision; no tenant signer vouches for it.
        policies.append(
            {
                "apiVersion": "policy.sigstore.dev/v1beta1",
                "kind": "ClusterImagePolicy",
                "metadata": {
                    "name": cluster_name(profile, "runtime-image"),
                    "labels": tenant_labels(profile),
                },
                "spec": {
                    "mode": "enforce",
                    "images": [{"glob": runtime}],
                    "authorities": [{"name": "platform-runtime", "static": {"action": "pass"}}],
                },
            }
        )
    return policies


def _attestation_policies(profile: TenantProfile) -> list[Manifest]:
    """One ClusterImagePolicy per required attestation, on the tenant's images and pods.

    Separate policies, because policy-controller admits an image when *any* authority of a policy
    passes, and every matching policy must pass: the signature policy above and each of these.
    """
    policies = []
    for index, requirement in enumerate(profile.spec.images.attestations):
        own = attest.identity_manifests(requirement.identities) or None
        authority = {
            **_policy_controller_authority(profile, own),
            "name": "tenant-attestations" if own is None else f"{attest.name(index)}-signers",
            "attestations": [attest.policy_controller_attestation(index, requirement)],
        }
        policies.append(
            {
                "apiVersion": "policy.sigstore.dev/v1beta1",
                "kind": "ClusterImagePolicy",
                "metadata": {
                    "name": cluster_name(profile, f"images-{attest.name(index)}"),
                    "labels": tenant_labels(profile),
                },
                "spec": {
                    "mode": "enforce",
                    "images": [{"glob": glob} for glob in registry_globs(profile)],
                    "match": [
                        {
                            "group": "",
                            "version": "v1",
                            "resource": "pods",
                            "selector": {
                                "matchLabels": {contract.LABEL_TENANT: profile.metadata.name}
                            },
                        }
                    ],
                    "authorities": [authority],
                },
            }
        )
    return policies


def _kyverno_cosign(profile: TenantProfile, identities: list[Manifest] | None = None) -> Manifest:
    root = profile.spec.images.signatures.trusted_root
    cosign: Manifest = {
        "keyless": {"identities": _identities(profile) if identities is None else identities}
    }
    if root == "production":
        cosign["ctlog"] = {"url": PUBLIC_GOOD["rekor"]}
    elif root == "staging":
        cosign["ctlog"] = {"url": STAGING["rekor"]}
        cosign["tuf"] = {"mirror": STAGING_TUF_MIRROR}
    else:
        path = Path(root)
        try:
            cosign["trustedRoot"] = {"value": path.read_text()}
        except OSError as err:
            raise SecuremlError(
                f"cannot read the trusted root {root}",
                why=str(err),
                fix="give spec.images.signatures.trustedRoot as a readable trusted_root.json path",
                where=f"profile {profile.metadata.name}",
            ) from None
    return cosign


def render_image_validating_policy(
    profile: TenantProfile, options: BundleOptions
) -> list[Manifest]:
    globs = registry_globs(profile)
    signed = profile.spec.images.signatures.required
    required = profile.spec.images.attestations
    if not globs or not (signed or required):
        return []
    # Every image the pod pulls: containers of every kind, and OCI image volumes (which Kyverno's
    # default extraction does not name).
    images_expression = (
        "object.spec.containers.map(c, c.image) + "
        "(has(object.spec.initContainers) ? object.spec.initContainers.map(c, c.image) : []) + "
        "(has(object.spec.ephemeralContainers) ? "
        "object.spec.ephemeralContainers.map(c, c.image) : []) + "
        "(has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.image) && "
        "has(v.image.reference)).map(v, v.image.reference) : [])"
    )
    validations = []
    if signed:
        validations.append(
            {
                "expression": "images.all.map(image, verifyImageSignatures(image, [attestors.tenant])).all(n, n > 0)",
                "message": "every image from the tenant's registries must carry a Sigstore "
                "signature by one of the tenant's signer identities",
            }
        )
    extra_attestors, attestations, attestation_checks = _kyverno_attestation_parts(profile)
    validations += attestation_checks
    # the image signers' attestor, where a check uses it (all but own-signer attestations)
    uses_tenant = signed or any(not r.identities for r in required)
    attestors = [{"name": "tenant", "cosign": _kyverno_cosign(profile)}] if uses_tenant else []
    attestors += extra_attestors
    return [
        {
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "ImageValidatingPolicy",
            "metadata": {"name": cluster_name(profile, "images"), "labels": tenant_labels(profile)},
            "spec": {
                "validationActions": ["Deny"],
                "failurePolicy": "Fail",
                # An ephemeral container is added through the subresource: check it there too.
                "matchConstraints": pod_match_constraints(
                    profile, ("pods", "pods/ephemeralcontainers")
                ),
                "matchImageReferences": [{"glob": glob} for glob in globs],
                "images": [{"name": "all", "expression": images_expression}],
                "attestors": attestors,
                **({"attestations": attestations} if attestations else {}),
                "validationConfigurations": {
                    "required": True,
                    "verifyDigest": True,
                    "mutateDigest": False,
                },
                "validations": validations,
            },
        }
    ]


def _kyverno_attestation_parts(
    profile: TenantProfile,
) -> tuple[list[Manifest], list[Manifest], list[Manifest]]:
    """Extra attestors (one per requirement with its own signers), the attestations, and their
    validations (docs/supply-chain.md "At admission")."""
    attestors, attestations, validations = [], [], []
    for index, requirement in enumerate(profile.spec.images.attestations):
        attestor = "tenant"
        if requirement.identities:
            attestor = attest.name(index)
            own = attest.identity_manifests(requirement.identities)
            attestors.append({"name": attestor, "cosign": _kyverno_cosign(profile, own)})
        attestations.append(attest.kyverno_attestation(index, requirement))
        validations += attest.kyverno_validations(index, requirement, attestor)
    return attestors, attestations, validations


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if options.image_policy == "kyverno":
        return render_image_validating_policy(profile, options)
    return render_cluster_image_policies(profile, options)
