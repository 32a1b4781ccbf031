"""Within `copied_executor_configs()` kfp's build gives the same platform spec, pipeline spec and
YAML as with kfp's own merge: for a chain of steps, and for a nested pipeline whose executor labels
the parent repeats (merged by kfp's own function)."""

import contextlib
import textwrap
from pathlib import Path

import pytest
from compilerhelp import COMPONENTS_SOURCE, make_profile

from secureml.compile import compiler
from secureml.compile.pipeline_loader import load_pipeline

PIPELINES = (
    COMPONENTS_SOURCE
    + """
@dsl.pipeline(name="inner")
def inner(x: int = 1) -> int:
    step = prepare(x=x)
    kubernetes.add_pod_label(step, "inner", "yes")
    return train(x=step.output).output

@dsl.pipeline(name="outer")
def outer(x: int = 0) -> None:
    value = prepare(x=x).output
    for _ in range(4):
        value = train(x=inner(x=value).output).output
"""
)


@pytest.mark.parametrize("pipeline", ["outer", "inner"])
def test_the_same_specs_as_kfps_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pipeline: str
) -> None:
    path = tmp_path / "pipelines.py"
    path.write_text(textwrap.dedent(PIPELINES))
    profile = make_profile()
    copied = compiler.compile_pipeline(load_pipeline(path, pipeline), profile)
    monkeypatch.setattr(compiler, "copied_executor_configs", contextlib.nullcontext)
    merged = compiler.compile_pipeline(load_pipeline(path, pipeline), profile)
    assert copied.component is not None and merged.component is not None
    assert copied.component.platform_spec == merged.component.platform_spec
    assert copied.component.pipeline_spec == merged.component.pipeline_spec
    assert copied.yaml_text == merged.yaml_text
    assert len(copied.component.platform_spec.platforms["kubernetes"].deployment_spec.executors) > 1
