"""A pipeline that breaks team-a's rules in several ways, to show what `secureml compile` reports.

secureml compile examples/rule_breaker.py --profile examples/profiles/team-a-dev.yaml
"""

from kfp import dsl

from secureml import MIG, TimeSlice, secure_component

PINNED = "ghcr.io/acme/ml-images/train@sha256:4c6d8b0e5a3f2917c1e0b7a6d5f4e3c2b1a09f8e7d6c5b4a3928171605f4e3d2"


@secure_component(image=PINNED, gpu=MIG("7g.80gb"))  # a whole A100 as one slice: not allowed
def train(epochs: int) -> int:
    return epochs


@secure_component(
    image="ghcr.io/acme/ml-images/eval:latest", gpu=TimeSlice(memory="32Gi", compute=80)
)
def evaluate(score: int) -> float:  # a moving tag, and more memory and compute than a share gets
    return float(score)


@dsl.component(base_image="python:3.11")  # Docker Hub, and kfp installed with pip at start
def report(value: float) -> str:
    return f"{value:.2f}"


@dsl.pipeline(name="rule-breaker")
def rule_breaker(epochs: int = 3) -> None:
    trained = train(epochs=epochs)
    trained.set_env_variable("LD_PRELOAD", "/tmp/mine.so")  # would unload the quota shim
    scored = evaluate(score=trained.output)
    report(value=scored.output)
