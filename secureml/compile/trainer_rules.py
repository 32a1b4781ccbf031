"""The compile rules of a trainer step against the profile's `spec.trainer` (docs/rules.md)."""

from __future__ import annotations

from collections.abc import Callable

from secureml.compile.decorator import SecureSettings
from secureml.gpu.request import GPURequest, WholeGPU
from secureml.nvidia.catalogue import RESOURCE_GPU
from secureml.profile.model import TenantProfile

AddViolation = Callable[[str, str, str], None]

# id -> what the rule guards; docs/rules.md documents each one (tests/compiler checks both agree).
RULES: dict[str, str] = {
    "trainer.forbidden": "a multi-node step, and the profile allows no TrainJobs",
    "trainer.runtime": "the trainer runtime is not one the profile allows",
    "trainer.max-nodes": "more nodes than spec.trainer.maxNodes",
    "trainer.gpu-kind": "a node's GPU request is not whole GPUs",
    "trainer.gpus-per-node": "more whole GPUs per node than spec.trainer.maxGpusPerNode",
    "trainer.quota": "nodes x GPUs beyond the namespace's GPU quota",
    "trainer.dra": "GPU nodes on a dra tenant",
    "trainer.runtime-install": "the nodes would install packages at run time",
    "trainer.outputs": "KFP outputs the nodes cannot return",
}


def check_trainer_step(
    settings: SecureSettings,
    request: GPURequest | None,
    command: tuple[str, ...],
    outputs: int,
    profile: TenantProfile,
    add: AddViolation,
) -> None:
    """Every `trainer.*` violation of one trainer step; `outputs` its KFP outputs."""
    trainer = profile.spec.trainer
    if trainer is None:
        add(
            "trainer.forbidden",
            f"the step runs on {settings.nodes} node(s) through Kubeflow Trainer "
            f"({settings.trainer_runtime}), and the profile allows no TrainJobs",
            "ask the platform team to add spec.trainer to the profile, or drop nodes= and "
            "trainer_runtime=",
        )
        return
    if settings.trainer_runtime not in trainer.allowed_runtimes:
        add(
            "trainer.runtime",
            f"trainer runtime {settings.trainer_runtime!r} is not one the profile allows",
            f"use one of {', '.join(trainer.allowed_runtimes)}",
        )
    if settings.nodes > trainer.max_nodes:
        add(
            "trainer.max-nodes",
            f"nodes={settings.nodes} exceeds spec.trainer.maxNodes ({trainer.max_nodes})",
            f"ask for at most {trainer.max_nodes} nodes",
        )
    if request is not None and not isinstance(request, WholeGPU):
        add(
            "trainer.gpu-kind",
            f"each node of a TrainJob asks for {request.describe()}; nodes take whole GPUs",
            "use gpu=WholeGPU(n) (per node), or run the step on one pod without nodes=",
        )
    gpus = request.count if isinstance(request, WholeGPU) else 0
    if gpus > trainer.max_gpus_per_node:
        add(
            "trainer.gpus-per-node",
            f"each node asks for {gpus} whole GPU(s), more than spec.trainer.maxGpusPerNode "
            f"({trainer.max_gpus_per_node})",
            f"ask for at most {trainer.max_gpus_per_node} per node",
        )
    quota = profile.spec.gpu.quota.get(RESOURCE_GPU)
    if gpus and quota is not None and gpus * settings.nodes > quota:
        add(
            "trainer.quota",
            f"{settings.nodes} node(s) x {gpus} GPU(s) = {gpus * settings.nodes} {RESOURCE_GPU}, "
            f"more than the namespace quota ({quota}): the nodes could never all start",
            "ask for fewer nodes or GPUs per node, or ask the platform team for more quota",
        )
    if profile.spec.gpu.backend == "dra" and request is not None:
        add(
            "trainer.dra",
            "the profile's GPU backend is dra, and a TrainJob's nodes get their GPUs through "
            "resourcesPerNode (device-plugin resources)",
            "run multi-node training on a device-plugin tenant",
        )
    text = " ".join(command)
    if "pip install" in text or "pip3 install" in text:
        add(
            "trainer.runtime-install",
            "the step installs packages when it starts (packages_to_install, "
            "install_kfp_package): every node would install them, unvetted, at run time",
            "build the packages into the digest-pinned image; pass no packages_to_install",
        )
    if outputs:
        add(
            "trainer.outputs",
            "the step declares KFP outputs, which the nodes of a TrainJob cannot return",
            "write checkpoints and models to storage the nodes mount (a PVC) and pass its path "
            "to the next step as a parameter",
        )
