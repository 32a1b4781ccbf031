"""The chained pipeline of benchmarks/compile.py: `STEPS` alternating CPU and MIG steps.

`chained(steps)` is the pipeline function for in-process runs; as a file, `chain` is the pipeline
of `CHAIN_STEPS` steps (environment, default 10) that `secureml compile` and a plain kfp process
each read in the whole-process runs.
"""

import os
from collections.abc import Callable

from kfp import dsl

from secureml import MIG, secure_component

IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "0" * 64


@secure_component(image=IMAGE)
def prepare(x: int) -> int:
    return x + 1


@secure_component(image=IMAGE, gpu=MIG("1g.10gb"))
def train(x: int) -> int:
    return x * 2


def chained(steps: int) -> Callable[[int], None]:
    def pipeline(x: int = 0) -> None:
        value = x
        for index in range(steps):
            value = (train if index % 2 else prepare)(x=value).output

    return pipeline


chain = dsl.pipeline(name="chain")(chained(int(os.environ.get("CHAIN_STEPS", "10"))))
