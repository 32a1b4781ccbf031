"""ResourceClaimTemplates for the `dra` backend (NVIDIA DRA driver, `resource.k8s.io/v1`)."""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata
from secureml.gpu.placement import claim_template_name
from secureml.gpu.request import MIG, TimeSlice, WholeGPU
from secureml.nvidia.catalogue import models_offering
from secureml.profile.model import TenantProfile

MIG_DEVICE_CLASS = "mig.nvidia.com"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
DRIVER = "gpu.nvidia.com"
REQUEST_NAME = "gpu"


def _template(
    profile: TenantProfile, name: str, exactly: Manifest, config: list[Manifest] | None = None
) -> Manifest:
    devices: Manifest = {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(profile, name),
        "spec": {"spec": {"devices": devices}},
    }


def _counted(exactly: Manifest, count: int) -> Manifest:
    if count == 1:
        return exactly
    return {**exactly, "allocationMode": "ExactCount", "count": count}


def mig_templates(profile: TenantProfile) -> list[Manifest]:
    gpu = profile.spec.gpu
    if gpu.mig is None:
        return []
    templates = []
    for mig_profile in sorted(set(gpu.mig.allowed_profiles)):
        models = models_offering(mig_profile, list(gpu.models))
        most = max((model.profiles[mig_profile].max_instances for model in models), default=1)
        exactly = {
            "deviceClassName": MIG_DEVICE_CLASS,
            "selectors": [
                {"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{mig_profile}'"}}
            ],
        }
        for count in range(1, most + 1):
            name = claim_template_name(MIG(mig_profile, count))
            templates.append(_template(profile, name, _counted(exactly, count)))
    return templates


def time_slice_templates(profile: TenantProfile) -> list[Manifest]:
    time_slice = profile.spec.gpu.time_slice
    if time_slice is None:
        return []
    name = claim_template_name(
        TimeSlice(memory=time_slice.max_memory, compute=time_slice.max_compute)
    )
    config = [
        {
            "requests": [REQUEST_NAME],
            "opaque": {
                "driver": DRIVER,
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {
                        "strategy": "TimeSlicing",
                        "timeSlicingConfig": {"interval": "Default"},
                    },
                },
            },
        }
    ]
    return [_template(profile, name, {"deviceClassName": GPU_DEVICE_CLASS}, config)]


def whole_gpu_templates(profile: TenantProfile) -> list[Manifest]:
    whole = profile.spec.gpu.whole_gpu
    if whole is None:
        return []
    return [
        _template(
            profile,
            claim_template_name(WholeGPU(count)),
            _counted({"deviceClassName": GPU_DEVICE_CLASS}, count),
        )
        for count in range(1, whole.max_per_step + 1)
    ]


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if profile.spec.gpu.backend != "dra":
        return []
    return [*mig_templates(profile), *time_slice_templates(profile), *whole_gpu_templates(profile)]
