"""The tenant's mutations, as data (`mutations_for_profile`), from its profile."""

from __future__ import annotations

import posixpath
from typing import Any

from secureml.core import contract
from secureml.pods.mutation.model import FromLabel, LabelIs, Operation, PodMutation
from secureml.profile.model import TenantProfile
from secureml.profile.runtime_image import injected, shim_library

SPIFFE_CSI_DRIVER = "csi.spiffe.io"
SPIFFE_VOLUME = "secureml-spiffe"
PODINFO_VOLUME = "secureml-podinfo"
PRELOAD_ITEM = "ld.so.preload"
CLAIM_NAME = "secureml-gpu"
SHIM_STEP = LabelIs(contract.LABEL_ISOLATION, (contract.ISOLATION_LEVELS[1],))  # timeslice-shim
# Every other value of the isolation label: the steps whose podinfo volume has no shim items.
NOT_SHIM_STEP = LabelIs(
    contract.LABEL_ISOLATION,
    tuple(
        v
        for v in (contract.ISOLATION_NONE, *contract.ISOLATION_LEVELS)
        if v not in SHIM_STEP.values
    ),
)


def mutations_for_profile(profile: TenantProfile) -> list[PodMutation]:
    """The mutations the tenant's admission policy applies to its secure steps, in order."""
    spec = profile.spec
    mutations: list[PodMutation] = []
    if spec.hardening.read_only_root_filesystem:
        mutations.append(
            PodMutation(
                "read-only-root",
                "root filesystem read-only, so /etc/ld.so.preload and the image stay as shipped",
                (
                    Operation(
                        "containers", ("securityContext", "readOnlyRootFilesystem"), "set", True
                    ),
                ),
            )
        )
    if spec.identity.required:
        socket_dir = posixpath.dirname(spec.identity.socket_path)
        mutations.append(
            PodMutation(
                "spiffe-socket",
                "the SPIFFE Workload API socket from the SPIFFE CSI driver",
                (
                    Operation(
                        "pod",
                        ("spec", "volumes"),
                        "append",
                        [
                            {
                                "name": SPIFFE_VOLUME,
                                "csi": {"driver": SPIFFE_CSI_DRIVER, "readOnly": True},
                            }
                        ],
                    ),
                    Operation(
                        "containers",
                        ("volumeMounts",),
                        "append",
                        [{"name": SPIFFE_VOLUME, "mountPath": socket_dir, "readOnly": True}],
                    ),
                ),
            )
        )
    mutations.append(_podinfo(profile))
    if injected(profile):
        mutations.append(_runtime(profile))
    if spec.gpu.backend == "dra":
        claimed = LabelIs(contract.LABEL_GPU_CLAIM)
        mutations.append(
            PodMutation(
                "dra-claim",
                "the ResourceClaimTemplate named by the step's gpu-claim label, for the main container",
                (
                    Operation(
                        "pod",
                        ("spec", "resourceClaims"),
                        "append",
                        [
                            {
                                "name": CLAIM_NAME,
                                "resourceClaimTemplateName": FromLabel(contract.LABEL_GPU_CLAIM),
                            }
                        ],
                        claimed,
                    ),
                    Operation(
                        "main", ("resources", "claims"), "append", [{"name": CLAIM_NAME}], claimed
                    ),
                ),
            )
        )
    return mutations


def _item(path: str, field_path: str) -> dict[str, Any]:
    return {"path": path, "fieldRef": {"fieldPath": field_path}}


def _podinfo_volume(*, shim: bool, preload: bool) -> dict[str, Any]:
    """The downward-API volume of the pod's own metadata; on shim steps also the shim's limits,
    and where `preload` the preload file's content (the preload annotation)."""
    items = []
    annotation = "metadata.annotations['{}']"
    if shim:
        items.append(
            _item(
                posixpath.relpath(contract.SHIM_LIMITS_PATH, contract.PODINFO_DIR),
                annotation.format(contract.ANNOTATION_LIMITS),
            )
        )
    if preload:
        items.append(_item(PRELOAD_ITEM, annotation.format(contract.ANNOTATION_SHIM_PRELOAD)))
    # the launcher's pod-level settings (enforcement/podinfo.py)
    items += [
        _item(posixpath.basename(contract.PODINFO_LABELS), "metadata.labels"),
        _item(posixpath.basename(contract.PODINFO_ANNOTATIONS), "metadata.annotations"),
    ]
    return {"name": PODINFO_VOLUME, "downwardAPI": {"items": items}}


def _podinfo(profile: TenantProfile) -> PodMutation:
    """The podinfo files, read-only, in every step: the launcher of every step reads its
    pod-level settings from them; shim steps also get the limits and `/etc/ld.so.preload`.

    Where the platform injects the launcher, every other step gets the platform's
    `/etc/ld.so.preload` too, empty (`secureml.runtimeInjected` requires the annotation empty or
    absent there): the injected launcher's own loader reads that file, and the image's copy
    could preload a library of the tenant's into it."""
    folder = {"name": PODINFO_VOLUME, "mountPath": contract.PODINFO_DIR, "readOnly": True}
    preload = {
        "name": PODINFO_VOLUME,
        "mountPath": contract.SHIM_PRELOAD_FILE,
        "subPath": PRELOAD_ITEM,
        "readOnly": True,
    }
    guard = injected(profile)
    other_mounts = [folder, preload] if guard else [folder]
    spec = profile.spec
    if spec.gpu.time_slice is None or spec.runtime.shim != "enforce":
        every_step = LabelIs(contract.LABEL_ISOLATION)
        return PodMutation(
            "podinfo",
            "the pod's own labels and annotations, read-only, for the launcher",
            (
                Operation(
                    "pod",
                    ("spec", "volumes"),
                    "append",
                    [_podinfo_volume(shim=False, preload=guard)],
                    every_step,
                ),
                Operation("containers", ("volumeMounts",), "append", other_mounts, every_step),
            ),
        )
    return PodMutation(
        "podinfo-shim-limits-and-preload",
        "the pod's own labels and annotations for the launcher, read-only; on shim steps also "
        "the shim's limits (the pod's own annotation) and the preload file",
        (
            Operation(
                "pod",
                ("metadata", "annotations", contract.ANNOTATION_SHIM_PRELOAD),
                "set",
                shim_library(profile),
                SHIM_STEP,
            ),
            Operation(
                "pod",
                ("spec", "volumes"),
                "append",
                [_podinfo_volume(shim=True, preload=True)],
                SHIM_STEP,
            ),
            Operation(
                "pod",
                ("spec", "volumes"),
                "append",
                [_podinfo_volume(shim=False, preload=guard)],
                NOT_SHIM_STEP,
            ),
            Operation("containers", ("volumeMounts",), "append", [folder, preload], SHIM_STEP),
            Operation("containers", ("volumeMounts",), "append", other_mounts, NOT_SHIM_STEP),
        ),
    )


def runtime_init_container(profile: TenantProfile) -> dict[str, Any]:
    """The init container that copies the platform runtime's launcher and shim into the
    runtime volume (contract.RUNTIME_*): restricted Pod Security, the tenant's user and group."""
    hardening = profile.spec.hardening
    return {
        "name": contract.RUNTIME_INIT_CONTAINER,
        "image": profile.spec.runtime.image,
        "command": list(contract.RUNTIME_INSTALL_COMMAND),
        "volumeMounts": [{"name": contract.RUNTIME_VOLUME, "mountPath": contract.RUNTIME_DIR}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": hardening.run_as_user,
            "runAsGroup": hardening.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _runtime(profile: TenantProfile) -> PodMutation:
    """The launcher and the shim from the platform's runtime image (issue 10, class 9)."""
    return PodMutation(
        "injected-runtime",
        "the platform's launcher and shim: an init container of the runtime image fills a "
        "memory-backed emptyDir, mounted read-only in the step's containers",
        (
            Operation(
                "pod",
                ("spec", "volumes"),
                "append",
                [
                    {
                        "name": contract.RUNTIME_VOLUME,
                        "emptyDir": dict(contract.RUNTIME_VOLUME_EMPTY_DIR),
                    }
                ],
            ),
            Operation(
                "pod", ("spec", "initContainers"), "prepend", [runtime_init_container(profile)]
            ),
            Operation(
                "containers",
                ("volumeMounts",),
                "append",
                [
                    {
                        "name": contract.RUNTIME_VOLUME,
                        "mountPath": contract.RUNTIME_DIR,
                        "readOnly": True,
                    }
                ],
            ),
        ),
    )
