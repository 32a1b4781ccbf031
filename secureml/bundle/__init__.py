"""The tenant bundle: the cluster objects that enforce a TenantProfile (`secureml profile render`).

Names are imported on first use, so `check-pod` does not load every renderer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from secureml.bundle.common import K8S_VERSIONS, BundleOptions
    from secureml.bundle.diff import bundle_diff
    from secureml.bundle.render import render_bundle, render_objects, write_bundle

_MODULE_OF = {
    "K8S_VERSIONS": "secureml.bundle.common",
    "BundleOptions": "secureml.bundle.common",
    "bundle_diff": "secureml.bundle.diff",
    "render_bundle": "secureml.bundle.render",
    "render_objects": "secureml.bundle.render",
    "write_bundle": "secureml.bundle.render",
}

__all__ = [
    "K8S_VERSIONS",
    "BundleOptions",
    "bundle_diff",
    "render_bundle",
    "render_objects",
    "write_bundle",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule: `from secureml.bundle import rbac` imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
