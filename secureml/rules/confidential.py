"""`secureml.confidentialComputing`: a GPU pod of a CC tenant runs only on CC-ready nodes."""

from __future__ import annotations

from secureml.core import contract
from secureml.gpu import placement as gpu
from secureml.nvidia.catalogue import NVIDIA_RESOURCE_PREFIX
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import quote
from secureml.rules.model import Rule

RULE_ID = "secureml.confidentialComputing"


def _holds_gpu() -> str:
    """CEL: some container asks for an `nvidia.com/` resource, or the pod holds a claim."""
    prefix = quote(NVIDIA_RESOURCE_PREFIX)
    holds = (
        "(has(c.resources) && ("
        f"(has(dyn(c.resources).limits) && dyn(c.resources).limits.exists(k, k.startsWith({prefix}))) || "
        f"(has(dyn(c.resources).requests) && dyn(c.resources).requests.exists(k, k.startsWith({prefix})))))"
    )
    return " || ".join(
        [
            *(f"(has({SPEC}.{lst}) && {SPEC}.{lst}.exists(c, {holds}))" for lst in CONTAINER_LISTS),
            f"(has({SPEC}.resourceClaims) && size({SPEC}.resourceClaims) > 0)",
        ]
    )


def confidential_rules(profile: TenantProfile) -> list[Rule]:
    """The CC rule of `profile`, or none where the profile does not require CC."""
    selector = gpu.confidential_selector(profile)
    if not selector:
        return []
    ((label, value),) = selector.items()
    key = quote(contract.ANNOTATION_CONFIDENTIAL_COMPUTING)
    annotations = "object.metadata.annotations"
    selects = (
        f"(has({SPEC}.nodeSelector) && {quote(label)} in {SPEC}.nodeSelector && "
        f"{SPEC}.nodeSelector[{quote(label)}] == {quote(value)})"
    )
    annotated = (
        f"(has({annotations}) && {key} in {annotations} && "
        f"{annotations}[{key}] == {quote(contract.CONFIDENTIAL_COMPUTING_REQUIRED)})"
    )
    wanted = (
        f"nodeSelector {label}={value} and annotation "
        f"{contract.ANNOTATION_CONFIDENTIAL_COMPUTING}={contract.CONFIDENTIAL_COMPUTING_REQUIRED}"
    )
    return [
        tenant_rule(
            profile,
            RULE_ID,
            f"a pod with a GPU must run on a confidential-computing node: {wanted}",
            f"!({_holds_gpu()}) || ({selects} && {annotated})",
            f"!{selects} ? "
            + quote(f"pod holds a GPU but does not select CC-ready nodes ({label}={value})")
            + " : "
            + quote(
                "pod holds a GPU but lacks the annotation "
                f"{contract.ANNOTATION_CONFIDENTIAL_COMPUTING}={contract.CONFIDENTIAL_COMPUTING_REQUIRED}"
            ),
        )
    ]
