"""Which pods a rule is in force for, defined once as CEL.

KFP (Argo backend) starts pods in the tenant namespace that the secureml compiler never saw: the
driver pods (`kfp-driver`), each with Argo's `init`/`wait` containers (`argoexec`). Step pods carry
KFP's `kfp-launcher` init container and Argo's containers beside the step's own `main`.

- Pod Security (`pss.*`) and the secureml rules that keep any container from switching a control
  off or running something unvetted (images, environment, non-root, Linux) are in force for EVERY
  pod: their `scope` is `EVERY_POD` ("").
- The step rules (labels, isolation, GPU, claims, shim annotations, read-only root) are in force
  for every pod that is not a KFP system pod: their `scope` is `STEP_POD`.

A KFP system pod is made only of KFP's and Argo's own images (`contract.KFP_SYSTEM_IMAGES`, matched
by repository on whole path segments: `REPO`, `REPO:<tag>`, `REPO@<digest>`,
`REPO:<tag>@<digest>`), in every container, init container and ephemeral container, and asks
for no GPU: only `cpu`, `memory` and `ephemeral-storage` as resources, and no `resourceClaims`.
Any other pod, labelled or not, is a step pod and must pass the step rules.

The offline engine evaluates a scope once per pod and skips the rules it excludes; the
ValidatingAdmissionPolicy renderer puts the step rules in a policy of their own whose
`matchConditions` entry is the very same `STEP_POD` text.
"""

from __future__ import annotations

from secureml import contract
from secureml.rules._cel import SPEC, every_container, quote, spec_bound, string_list

EVERY_POD = ""

# Resources a KFP system pod may ask for: the kubelet's own, never an extended (device) resource.
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def system_image(var: str = "c") -> str:
    """CEL: the container `var` runs one of KFP's or Argo's own images (any tag or digest).

    The repository is compared on whole path segments: the image is `REPO` or starts with `REPO:`
    or `REPO@`, so `kfp-driver-debug` and `kfp-driver/shell` are other repositories. The domain of a
    reference ends at its first `/` and a path component cannot hold `:` or `@`, so nothing after
    `REPO:` can name another repository; a malformed tag or digest there is refused by the container
    runtime's reference parser (the pod does not start). String tests, not a pattern: the Python
    engine compiles a pattern on every call (~150 us against ~1 us).
    """
    tests = " || ".join(
        f"{var}.image == {quote(repo)} || {var}.image.startsWith({quote(repo + ':')}) || "
        f"{var}.image.startsWith({quote(repo + '@')})"
        for repo in contract.KFP_SYSTEM_IMAGES
    )
    return f"(has({var}.image) && ({tests}))"


def _native_resources_only(var: str = "c") -> str:
    native = string_list(NATIVE_RESOURCES)
    return (
        f"(!has({var}.resources) || ("
        f"(!has({var}.resources.limits) || {var}.resources.limits.all(k, k in {native})) && "
        f"(!has({var}.resources.requests) || {var}.resources.requests.all(k, k in {native}))))"
    )


_MAIN_FIRST = ("containers", "initContainers", "ephemeralContainers")


def _kfp_system_pod() -> str:
    # `containers` first: a step pod's `main` runs the tenant's image and ends the test at once.
    images = every_container(system_image(), lists=_MAIN_FIRST)
    no_gpu = (
        f"{every_container(_native_resources_only())} && "
        f"(!has({SPEC}.resourceClaims) || size({SPEC}.resourceClaims) == 0)"
    )
    return spec_bound(f"{images} && {no_gpu}")


KFP_SYSTEM_POD = _kfp_system_pod()
STEP_POD = f"!({KFP_SYSTEM_POD})"
STEP_POD_CONDITION_NAME = "secureml-step-pod"
