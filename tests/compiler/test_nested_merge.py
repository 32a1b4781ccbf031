"""A component used in a pipeline and in a pipeline it calls: each task keeps its own kubernetes
config (kfp 2.17's merge of the nested pipeline overwrote one of the parent's; which one varied
with protobuf map order, so with two such components one was always wrong)."""

from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import compile_pipeline
from secureml.core import contract
from tests.support.compiled import IMAGE, docs
from tests.support.profiles import make_profile


@secure_component(image=IMAGE)
def echo(msg: str) -> str:
    return msg


@secure_component(image=IMAGE)
def shout(msg: str) -> str:
    return msg


@dsl.pipeline(name="inner")
def inner(msg: str) -> None:
    said = echo(msg=msg)
    shout(msg=said.output)


@dsl.pipeline(name="outer")
def outer() -> None:
    echo(msg="a")
    shout(msg="b")
    inner(msg="c")


def test_every_executor_keeps_its_own_step_label() -> None:
    compiled = compile_pipeline(outer, make_profile())  # admission checked: no launcherEnv refusal
    spec, platform = docs(compiled.yaml_text)
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    steps = {}
    for label, executor in spec["deploymentSpec"]["executors"].items():
        env = {e["name"]: e.get("value") for e in executor["container"]["env"]}
        steps[label] = (
            env[contract.ENV_STEP],
            k8s[label]["podMetadata"]["labels"]["secureml.dev/step"],
        )
    assert steps == {
        "exec-echo": ("echo", "echo"),
        "exec-shout": ("shout", "shout"),
        "exec-echo-2": ("inner.echo", "inner.echo"),
        "exec-shout-2": ("inner.shout", "inner.shout"),
    }
