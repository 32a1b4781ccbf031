"""TrainJobs for tests: a tenant that allows them, a trainer pipeline, Trainer's torch runtime
(no `from __future__ import annotations`: kfp reads the step's parameter types)."""

from typing import Any

import yaml

from secureml.compile.compiler import CompiledPipeline, compile_pipeline
from secureml.profile.model import TenantProfile
from tests.support.compiled import IMAGE
from tests.support.paths import fixture_file
from tests.support.profiles import make_profile

TRAINER = {"maxNodes": 4, "maxGpusPerNode": 2, "allowedRuntimes": ["torch-distributed"]}


def trainer_profile(**spec_changes: Any) -> TenantProfile:
    """team-a with TrainJobs allowed (4 nodes of 2 whole GPUs) and the GPU quota to run them."""
    changes: dict[str, Any] = {"trainer": TRAINER, "gpu": {"quota": {"nvidia.com/gpu": 8}}}
    changes.update(spec_changes)
    return make_profile(**changes)


def trainer_pipeline(**component: Any) -> Any:
    """A pipeline of one trainer step `train` (defaults: 2 nodes of WholeGPU(2), torch)."""
    from kfp import dsl

    from secureml import WholeGPU, secure_component

    settings: dict[str, Any] = {
        "image": IMAGE,
        "gpu": WholeGPU(2),
        "nodes": 2,
        "trainer_runtime": "torch-distributed",
        **component,
    }

    @secure_component(**settings)
    def train(epochs: int) -> None:
        print(epochs)

    @dsl.pipeline(name="fine-tune")
    def pipeline(epochs: int = 1) -> None:
        train(epochs=epochs)

    return pipeline


def compiled_trainer(profile: TenantProfile | None = None, **component: Any) -> CompiledPipeline:
    return compile_pipeline(trainer_pipeline(**component), profile or trainer_profile())


def torch_runtime() -> dict[str, Any]:
    """Trainer v2.3.0's own torch-distributed ClusterTrainingRuntime."""
    data: dict[str, Any] = yaml.safe_load(
        fixture_file("kubeflow-trainer", "torch_distributed.yaml").read_text()
    )
    return data
