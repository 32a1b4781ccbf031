"""The GPUs secureml knows and the names NVIDIA's Kubernetes stack gives them.

Device-plugin resources, GPU Feature Discovery labels, MIG-capable models and their profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from secureml.nvidia.mig_names import mig_memory_gb

NVIDIA_RESOURCE_PREFIX = "nvidia.com/"  # every extended resource of NVIDIA's device plugin
RESOURCE_GPU = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # `mixed` strategy: one resource per MIG profile
RESOURCE_GPU_SHARED = "nvidia.com/gpu.shared"  # time-slicing with renameByDefault
# Node labels published by NVIDIA GPU Feature Discovery (k8s-device-plugin README, "Catalog of Labels").
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
SHARING_TIME_SLICING = "time-slicing"
# Set by the GPU operator's CC manager (NVIDIA/k8s-cc-manager, gpu_operator_eviction.py
# `set_cc_state_label`): "true" once every GPU of the node is in CC mode `on` (or `ppcie`), "false"
# for `off`, empty for `devtools`; `nvidia.com/cc.mode.state` holds the mode it applied.
LABEL_CC_READY = "nvidia.com/cc.ready.state"
CC_READY = "true"


# --- the MIG catalogue -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of one GPU model (NVIDIA MIG user guide, "Supported MIG Profiles")."""

    name: str  # e.g. "1g.10gb"
    compute_slices: int  # GPCs out of the model's compute_slices
    memory_slices: int  # memory slices out of the model's memory_slices
    memory_gb: int  # the "<n>gb" of the name
    max_instances: int  # how many fit on one GPU at once


@dataclass(frozen=True, slots=True)
class GPUModel:
    """A MIG-capable GPU model as tenant profiles name it (`spec.gpu.models`)."""

    name: str  # e.g. "A100-80GB"
    products: tuple[str, ...]  # GFD `nvidia.com/gpu.product` values (NVML name, spaces -> '-')
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile] = field(hash=False)
    confidential_computing: bool = (
        False  # Hopper and Blackwell: CC mode (NVIDIA CC deployment guide)
    )


def _profile(name: str, compute: int, memory: int, max_instances: int) -> MigProfile:
    return MigProfile(name, compute, memory, mig_memory_gb(name), max_instances)


def _seven_slice_family(eighth: int, quarter: int, half: int, full: int) -> dict[str, MigProfile]:
    """The A100/H100/H200/B200 layout: 7 compute and 8 memory slices; the arguments are the GB of
    the 1/8, 2/8, 4/8 and 8/8 memory profiles."""
    rows = (
        (f"1g.{eighth}gb", 1, 1, 7),
        (f"1g.{eighth}gb+me", 1, 1, 1),
        (f"1g.{quarter}gb", 1, 2, 4),
        (f"2g.{quarter}gb", 2, 2, 3),
        (f"3g.{half}gb", 3, 4, 2),
        (f"4g.{half}gb", 4, 4, 1),
        (f"7g.{full}gb", 7, 8, 1),
    )
    return {name: _profile(name, c, m, n) for name, c, m, n in rows}


MIG_CATALOGUE: dict[str, GPUModel] = {
    model.name: model
    for model in (
        GPUModel(
            "A30",
            ("NVIDIA-A30",),
            4,
            4,
            {
                name: _profile(name, c, m, n)
                for name, c, m, n in (
                    ("1g.6gb", 1, 1, 4),
                    ("1g.6gb+me", 1, 1, 1),
                    ("2g.12gb", 2, 2, 2),
                    ("2g.12gb+me", 2, 2, 1),
                    ("4g.24gb", 4, 4, 1),
                )
            },
        ),
        GPUModel(
            "A100-40GB",
            ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"),
            7,
            8,
            _seven_slice_family(5, 10, 20, 40),
        ),
        GPUModel(
            "A100-80GB",
            ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
            7,
            8,
            _seven_slice_family(10, 20, 40, 80),
        ),
        GPUModel(
            "H100-80GB",
            ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"),
            7,
            8,
            _seven_slice_family(10, 20, 40, 80),
            confidential_computing=True,
        ),
        GPUModel(
            "H100-94GB",
            ("NVIDIA-H100-NVL",),
            7,
            8,
            _seven_slice_family(12, 24, 47, 94),
            confidential_computing=True,
        ),
        GPUModel(
            "H200-141GB",
            ("NVIDIA-H200", "NVIDIA-H200-NVL"),
            7,
            8,
            _seven_slice_family(18, 35, 71, 141),
            confidential_computing=True,
        ),
        GPUModel(
            "B200",
            ("NVIDIA-B200",),
            7,
            8,
            _seven_slice_family(23, 45, 90, 180),
            confidential_computing=True,
        ),
    )
}


def models_offering(profile_name: str, model_names: list[str]) -> list[GPUModel]:
    """The models among `model_names` (catalogue order) that have MIG profile `profile_name`."""
    return [
        model
        for name in model_names
        if (model := MIG_CATALOGUE.get(name)) is not None and profile_name in model.profiles
    ]


# --- resource and label names ---------------------------------------------------------------


def mig_resource_name(profile_name: str) -> str:
    """The extended resource the device plugin's `mixed` strategy advertises for a MIG profile."""
    return f"{MIG_RESOURCE_PREFIX}{profile_name}"


def mig_product_names(profile_name: str, model_names: list[str]) -> list[str]:
    """GFD's `nvidia.com/gpu.product` values under the `single` strategy: `<product>-MIG-<profile>`."""
    return [
        f"{product}-MIG-{profile_name}"
        for model in models_offering(profile_name, model_names)
        for product in model.products
    ]
