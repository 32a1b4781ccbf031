"""The tenant's mutations, as data (`mutations_for_profile`), from its profile."""

from __future__ import annotations

import posixpath

from secureml import contract
from secureml.bundle.mutation.model import FromLabel, LabelIs, Operation, PodMutation
from secureml.profile import TenantProfile

SPIFFE_CSI_DRIVER = "csi.spiffe.io"
SPIFFE_VOLUME = "secureml-spiffe"
PODINFO_VOLUME = "secureml-podinfo"
PRELOAD_ITEM = "ld.so.preload"
CLAIM_NAME = "secureml-gpu"


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
    shim_step = LabelIs(contract.LABEL_ISOLATION, ("timeslice-shim",))
    if spec.gpu.time_slice is not None and spec.runtime.shim == "enforce":
        limits_file = posixpath.relpath(contract.SHIM_LIMITS_PATH, contract.PODINFO_DIR)
        mutations.append(
            PodMutation(
                "shim-limits-and-preload",
                "the shim's limits (the pod's own annotation) and the preload file, read-only",
                (
                    Operation(
                        "pod",
                        ("metadata", "annotations", contract.ANNOTATION_SHIM_PRELOAD),
                        "set",
                        contract.SHIM_LIBRARY_PATH,
                        shim_step,
                    ),
                    Operation(
                        "pod",
                        ("spec", "volumes"),
                        "append",
                        [
                            {
                                "name": PODINFO_VOLUME,
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": limits_file,
                                            "fieldRef": {
                                                "fieldPath": "metadata.annotations"
                                                f"['{contract.ANNOTATION_LIMITS}']"
                                            },
                                        },
                                        {
                                            "path": PRELOAD_ITEM,
                                            "fieldRef": {
                                                "fieldPath": "metadata.annotations"
                                                f"['{contract.ANNOTATION_SHIM_PRELOAD}']"
                                            },
                                        },
                                        # the launcher's pod-level settings
                                        # (enforcement/podinfo.py)
                                        {
                                            "path": posixpath.basename(contract.PODINFO_LABELS),
                                            "fieldRef": {"fieldPath": "metadata.labels"},
                                        },
                                        {
                                            "path": posixpath.basename(
                                                contract.PODINFO_ANNOTATIONS
                                            ),
                                            "fieldRef": {"fieldPath": "metadata.annotations"},
                                        },
                                    ]
                                },
                            }
                        ],
                        shim_step,
                    ),
                    Operation(
                        "containers",
                        ("volumeMounts",),
                        "append",
                        [
                            {
                                "name": PODINFO_VOLUME,
                                "mountPath": contract.PODINFO_DIR,
                                "readOnly": True,
                            },
                            {
                                "name": PODINFO_VOLUME,
                                "mountPath": contract.SHIM_PRELOAD_FILE,
                                "subPath": PRELOAD_ITEM,
                                "readOnly": True,
                            },
                        ],
                        shim_step,
                    ),
                ),
            )
        )
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
