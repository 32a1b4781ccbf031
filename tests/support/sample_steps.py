"""A step of each shape a pipeline author writes: a secure component, a plain kfp component, a
container component, and a nested pipeline (no `from __future__ import annotations`: kfp reads the
parameter types)."""

from kfp import dsl

from secureml import WholeGPU, secure_component
from tests.support.compiled import IMAGE


@secure_component(image=IMAGE)
def plain_step(x: int) -> int:
    return x


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def kfp_step(x: int) -> int:
    return x + 1


@secure_component(gpu=WholeGPU(2))
def whole_container() -> dsl.ContainerSpec:
    return dsl.ContainerSpec(image=IMAGE, command=["python3", "-c"], args=["print('hi')"])


@dsl.pipeline(name="inner")
def inner(x: int = 1) -> int:
    return plain_step(x=x).output


@dsl.pipeline(name="outer")
def outer() -> None:
    first = kfp_step(x=1)
    inner(x=first.output)
