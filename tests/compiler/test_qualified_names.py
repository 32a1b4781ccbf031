"""A nested pipeline's step is named by its qualified name (`inner.score`) in the compile table,
the report, the violations and the preview's mounts, as in its step label and audit records."""

import pytest
from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.report import render_text
from tests.support.compiled import IMAGE
from tests.support.profiles import make_profile

FOREIGN = "docker.io/library/python@sha256:" + "2" * 64


@secure_component(image=IMAGE)
def score(x: float) -> float:
    return x * 2


@secure_component(image=FOREIGN)
def foreign(x: float) -> float:
    return x


@dsl.pipeline(name="inner")
def inner(x: float = 1.0) -> float:
    return score(x=x).output


@dsl.pipeline(name="outer")
def outer(x: float = 1.0) -> None:
    score(x=x)
    inner(x=x)


@dsl.pipeline(name="inner-bad")
def inner_bad(x: float = 1.0) -> float:
    return foreign(x=x).output


@dsl.pipeline(name="outer-bad")
def outer_bad(x: float = 1.0) -> None:
    foreign(x=x)
    inner_bad(x=x)


def test_the_table_and_report_name_nested_steps_by_their_qualified_name() -> None:
    compiled = compile_pipeline(outer, make_profile())
    assert sorted(step.task for step in compiled.steps) == ["inner.score", "score"]
    assert all(step.task == step.step for step in compiled.steps)
    assert all(step.mounts for step in compiled.steps), "each preview found its report"
    table = render_text(compiled.report())
    assert "inner.score" in table


def test_violations_name_nested_steps_by_their_qualified_name() -> None:
    with pytest.raises(CompileError) as err:
        compile_pipeline(outer_bad, make_profile())
    tasks = sorted({v.task for v in err.value.violations})
    assert tasks == ["foreign", "inner-bad.foreign"]
    assert "  inner-bad.foreign: [" in err.value.diagnostics()
