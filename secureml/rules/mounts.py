"""Tenant mounts only where the platform allows them (`secureml.mountPaths`)."""

from __future__ import annotations

from typing import Any

from secureml.core import contract
from secureml.pods.mutation.catalogue import mutations_for_profile
from secureml.pods.preview import BACKEND_SCRATCH, KFP_LAUNCHER_VOLUME
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, container_rule_message, every_container
from secureml.rules.cel.text import quote, string_list
from secureml.rules.model import Rule
from secureml.rules.modelcar import admitted_mount
from secureml.rules.runtime import runtime_container
from secureml.rules.scope import system_image
from secureml.rules.token_mount import SERVICE_ACCOUNT_TOKEN_MOUNT

ARGO_VAR_RUN_VOLUME = "var-run-argo"
# Shared memory for a step's processes (PyTorch's DataLoader workers pass tensors through it): a
# memory-backed emptyDir at /dev/shm, which counts against the container's memory limit.
SHARED_MEMORY_DIR = "/dev/shm"
# KFP's and Argo's emptyDirs in `main`: (volume name, mount path).
KFP_MOUNTS = (
    (KFP_LAUNCHER_VOLUME, contract.KFP_LAUNCHER_DIR),
    *BACKEND_SCRATCH,
    (ARGO_VAR_RUN_VOLUME, contract.ARGO_VAR_RUN_DIR),
)


def platform_mounts(
    profile: TenantProfile,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The mounts the mutating policy adds to every container, and its volumes by name."""
    mounts: list[dict[str, Any]] = []
    volumes: dict[str, dict[str, Any]] = {}
    for mutation in mutations_for_profile(profile):
        for op in mutation.operations:
            if op.kind != "append":
                continue
            if op.target == "pod" and op.path == ("spec", "volumes"):
                for volume in op.value:  # (podinfo: one shape per step kind; all its items)
                    volumes[volume["name"]] = _merged(volumes.get(volume["name"]), volume)
            elif op.target == "containers" and op.path == ("volumeMounts",):
                mounts.extend(op.value)
    return mounts, volumes


def _merged(known: dict[str, Any] | None, volume: dict[str, Any]) -> dict[str, Any]:
    """A platform volume's shapes as one: a downward-API volume with the items of each."""
    if known is None or "downwardAPI" not in volume:
        return volume
    items = [*known["downwardAPI"]["items"]]
    items += [item for item in volume["downwardAPI"]["items"] if item not in items]
    return {**volume, "downwardAPI": {"items": items}}


def _volume_is(name: str, source: str) -> str:
    """CEL: the pod has a volume `name` whose source satisfies `source` (over `v`)."""
    return f"(has({SPEC}.volumes) && {SPEC}.volumes.exists(v, v.name == {quote(name)} && {source}))"


def platform_source(volume: dict[str, Any]) -> str:
    """CEL over `v`: the volume's source is the platform's (its kind, driver or items)."""
    if "csi" in volume:
        return f"has(v.csi) && v.csi.driver == {quote(volume['csi']['driver'])}"
    if "emptyDir" in volume:
        return "has(v.emptyDir)"
    if "downwardAPI" in volume:
        items = volume["downwardAPI"]["items"]
        pairs = " || ".join(
            f"(i.path == {quote(item['path'])} && "
            f"i.fieldRef.fieldPath == {quote(item['fieldRef']['fieldPath'])})"
            for item in items
        )
        return (
            "has(v.downwardAPI) && has(v.downwardAPI.items) && v.downwardAPI.items.all(i, "
            f"has(i.fieldRef) && !has(i.resourceFieldRef) && ({pairs}))"
        )
    raise ValueError(f"no source test for the platform volume {volume['name']!r}")


def mount_is(mount: dict[str, Any], source: str) -> str:
    sub_path = (
        f"has(m.subPath) && m.subPath == {quote(mount['subPath'])}"
        if "subPath" in mount
        else "!has(m.subPath)"
    )
    read_only = " && has(m.readOnly) && m.readOnly == true" if mount.get("readOnly") else ""
    return (
        f"(m.name == {quote(mount['name'])} && m.mountPath == {quote(mount['mountPath'])} && "
        f"{sub_path} && !has(m.subPathExpr){read_only} && "
        f"{_volume_is(mount['name'], source)})"
    )


def mount_ok(profile: TenantProfile) -> str:
    """CEL over the mount `m`: one of the allowed mounts of a step's own container."""
    mounts, volumes = platform_mounts(profile)
    allowed = [mount_is(m, platform_source(volumes[m["name"]])) for m in mounts]
    allowed += [
        mount_is({"name": name, "mountPath": path}, "has(v.emptyDir)") for name, path in KFP_MOUNTS
    ]
    allowed.append(SERVICE_ACCOUNT_TOKEN_MOUNT)
    allowed.append(admitted_mount())  # KFP's modelcar, as an image volume (secureml.modelcar)
    allowed.append(
        f"(m.mountPath == {quote(SHARED_MEMORY_DIR)} && !has(m.subPath) && !has(m.subPathExpr) && "
        + _volume_is_named_by_mount(
            "has(v.emptyDir) && has(v.emptyDir.medium) && v.emptyDir.medium == 'Memory'"
        )
        + ")"
    )
    hardening = profile.spec.hardening
    if hardening.scratch_mounts:
        allowed.append(
            f"(m.mountPath in {string_list(hardening.scratch_mounts)} && "
            f"{_volume_is_named_by_mount('has(v.emptyDir)')})"
        )
    prefixes = [p.rstrip("/") for p in hardening.data_mount_prefixes]
    if prefixes:
        under = " || ".join(
            f"m.mountPath == {quote(p)} || m.mountPath.startsWith({quote(p + '/')})"
            for p in prefixes
        )
        allowed.append(f"(!m.mountPath.contains('..') && ({under}))")
    return "(" + " || ".join(allowed) + ")"


def _volume_is_named_by_mount(source: str) -> str:
    return f"(has({SPEC}.volumes) && {SPEC}.volumes.exists(v, v.name == m.name && {source}))"


def mount_rules(profile: TenantProfile) -> list[Rule]:
    """The class 2 rule of `profile` (step pods only)."""
    hardening = profile.spec.hardening
    predicate = (
        f"({system_image()} || {runtime_container(profile)} || "
        f"((!has(c.volumeMounts) || c.volumeMounts.all(m, {mount_ok(profile)}))"
        " && !has(c.volumeDevices)))"
    )
    where = ", ".join(
        [
            "the platform's own mounts",
            "KFP's emptyDirs at their paths",
            f"a memory-backed emptyDir at {SHARED_MEMORY_DIR}",
            f"emptyDirs at {', '.join(hardening.scratch_mounts) or '(no scratch mount)'}",
            f"data volumes under {', '.join(hardening.data_mount_prefixes) or '(no data prefix)'}",
        ]
    )
    tail = f"mounts a volume outside the allowed paths ({where}) or uses volumeDevices"
    return [
        tenant_rule(
            profile,
            "secureml.mountPaths",
            f"a step's container mounts volumes only at allowed paths ({where}), never at, above "
            "or below a platform path, and no volumeDevices",
            every_container(predicate),
            container_rule_message(predicate, tail),
        )
    ]
