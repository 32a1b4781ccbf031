"""KFP's `oci://` model inputs (modelcars): admitted only as a read-only image volume of `main` at
KFP's path, never as KFP's sidecar, which runs the model image's own shell beside the launcher."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, container_rule_message, every_container
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule
from secureml.rules.scope import system_image

# KFP 2.17's driver (`addModelcarsToPodSpec`) names the i-th `oci://` input's containers
# `oci-prepull-<i>` (init) and `oci-<i>`, its volume `oci-<i>`, and mounts it in `main` at
# `/oci/<URI less oci://, / as _>`; KFP's launcher reads the model at that path + `/models`.
MODELCAR_DIR = "/oci"
SIDECAR_NAME = "^oci-(prepull-)?[0-9]+$"
VOLUME_NAME = "^oci-[0-9]+$"
# One path segment: the image reference with `/` as `_` (registry, repository, `:tag`, `@digest`).
MOUNT_PATH = "^/oci/[A-Za-z0-9_][A-Za-z0-9._:@-]*$"


def _volume_of(mount: str, source: str) -> str:
    return f"(has({SPEC}.volumes) && {SPEC}.volumes.exists(v, v.name == {mount}.name && {source}))"


def _modelcar_mount() -> str:
    """CEL over `m`: a mount that belongs to a modelcar (under /oci, or of an `oci-<i>` volume)."""
    return (
        f"(m.mountPath == {quote(MODELCAR_DIR)} || "
        f"m.mountPath.startsWith({quote(MODELCAR_DIR + '/')}) || "
        f"m.name.matches({quote(VOLUME_NAME)}))"
    )


def admitted_mount() -> str:
    """CEL over `m`: KFP's modelcar mount in the admitted form: an image volume `oci-<i>` at
    `/oci/<one segment>`, read-only, the whole image (no subPath). `main` only (the rule's)."""
    return (
        f"(m.mountPath.matches({quote(MOUNT_PATH)}) && m.name.matches({quote(VOLUME_NAME)}) && "
        "!has(m.subPath) && !has(m.subPathExpr) && !has(m.mountPropagation) && "
        "has(m.readOnly) && m.readOnly == true && "
        f"{_volume_of('m', 'has(v.image) && has(v.image.reference)')})"
    )


def modelcar_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.modelcar` of `profile` (step pods)."""
    main = quote(contract.KFP_MAIN_CONTAINER)
    predicate = (
        f"!c.name.matches({quote(SIDECAR_NAME)}) && ({system_image()} || "
        f"!has(c.volumeMounts) || c.volumeMounts.all(m, !{_modelcar_mount()} || "
        f"(c.name == {main} && {admitted_mount()})))"
    )
    why = (
        "KFP's modelcar sidecar (oci-prepull-<i>, oci-<i>) runs the model image's own shell "
        "beside the launcher, in a process namespace shared with it"
    )
    admitted = (
        f"an oci:// model is admitted only as a read-only image volume oci-<i> of the model "
        f"image (digest-pinned, from the tenant's registries) mounted in main at "
        f"{MODELCAR_DIR}/<image, / as _>"
    )
    fix = (
        "import the model from the artifact store (s3://, gs://, minio://) and verify it with "
        "verify_inputs=, or have the platform mount the model image as that image volume"
    )
    return [
        tenant_rule(
            profile,
            "secureml.modelcar",
            f"{admitted}; {why}: {fix}",
            every_container(predicate),
            container_rule_message(
                predicate,
                f"is KFP's modelcar sidecar or mounts a modelcar otherwise: {why}; "
                f"{admitted}; {fix}",
            ),
        )
    ]
