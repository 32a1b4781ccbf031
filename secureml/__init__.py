"""secureml: Kubeflow Pipelines that are safe to run on GPUs shared between tenants.

The public API is loaded on first use, so `import secureml` does not import kfp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["MIG", "ModelSignature", "TimeSlice", "WholeGPU", "secure_component"]

_LAZY = {
    "MIG": "secureml.gpu.request",
    "ModelSignature": "secureml.supplychain.verify_inputs",
    "TimeSlice": "secureml.gpu.request",
    "WholeGPU": "secureml.gpu.request",
    "secure_component": "secureml.compile.decorator",
}

if TYPE_CHECKING:
    from secureml.compile.decorator import secure_component
    from secureml.gpu.request import MIG, TimeSlice, WholeGPU
    from secureml.supplychain.verify_inputs import ModelSignature


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'secureml' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
