"""Ready-made secure KFP components: GPU preflight, standalone scrub, image and model
verification, audit report, node doctor.

Each factory builds the component for the step image you give (digest-pinned, from your tenant's
registry, carrying kfp and secureml); `secureml compile` then secures it like any other step:

    from secureml.components import audit_report_op, gpu_scrub_op
    from secureml import MIG

    scrub = gpu_scrub_op(image=RUNTIME, gpu=MIG("1g.10gb"))
    report = audit_report_op(image=RUNTIME)

docs/components.md describes inputs and outputs.
"""

from __future__ import annotations

from typing import Any

from secureml.gpu.request import GPURequest


def _build(function: Any, image: str, gpu: GPURequest | None) -> Any:
    from secureml.compile.decorator import secure_component

    return secure_component(function, image=image, gpu=gpu)


def gpu_preflight_op(*, image: str, gpu: GPURequest) -> Any:
    """A step that checks its GPUs against `gpu` through NVML and writes the findings (`report`)."""
    from secureml.components.steps import gpu_preflight

    return _build(gpu_preflight, image, gpu)


def gpu_scrub_op(*, image: str, gpu: GPURequest) -> Any:
    """A step that zeroes and verifies the memory of the GPUs it is given (input `verify`)."""
    from secureml.components.steps import gpu_scrub

    return _build(gpu_scrub, image, gpu)


def verify_image_op(*, image: str) -> Any:
    """A step that verifies another image's Sigstore bundle offline (`secureml.supplychain`)."""
    from secureml.components.steps import verify_image

    return _build(verify_image, image, None)


def verify_model_op(*, image: str) -> Any:
    """A step that verifies a model's OpenSSF model-signing signature (input `model`) against the
    profile's trusted model signers, in the launcher before the step runs (exit 78 on failure)."""
    from secureml.compile.decorator import secure_component
    from secureml.components.steps import verify_model

    return secure_component(verify_model, image=image, verify_inputs=["model"])


def doctor_node_op(*, image: str, gpu: GPURequest) -> Any:
    """A step that runs `secureml doctor node` on the node and GPUs it is given (inputs
    `profiles`, `node_labels`, `fail_on_fail`), writing the report (`report`, `metrics`)."""
    from secureml.components.doctor import doctor_node

    return _build(doctor_node, image, gpu)


def audit_report_op(*, image: str) -> Any:
    """A step that renders a run's audit records as Markdown and HTML report artifacts."""
    from secureml.components.steps import audit_report

    return _build(audit_report, image, None)


__all__ = [
    "audit_report_op",
    "doctor_node_op",
    "gpu_preflight_op",
    "gpu_scrub_op",
    "verify_image_op",
    "verify_model_op",
]
