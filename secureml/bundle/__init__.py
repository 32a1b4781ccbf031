"""The tenant bundle: the cluster objects that enforce a TenantProfile (`secureml profile render`).

One module per concern renders its objects; `render` assembles the kustomize folder and `diff`
compares two renders. `apply_mutations` is the Python twin of the bundle's
MutatingAdmissionPolicy, used to preview the pod the cluster would admit.
"""

from secureml.bundle.common import K8S_VERSIONS, BundleOptions
from secureml.bundle.diff import bundle_diff
from secureml.bundle.mutation.apply import apply_mutations
from secureml.bundle.render import render_bundle, render_objects, write_bundle

__all__ = [
    "K8S_VERSIONS",
    "BundleOptions",
    "apply_mutations",
    "bundle_diff",
    "render_bundle",
    "render_objects",
    "write_bundle",
]
