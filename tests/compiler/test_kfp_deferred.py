"""`secureml compile` loads the pipeline file with kfp's builds deferred (`secureml._kfp.deferred`):
the compiled YAML and report are those of the file loaded as kfp builds it, a deferred pipeline
read by anything else is kfp's own build, and an error the pipeline function raises is reported
as the import reported it (the same message and line)."""

import json
import textwrap
from pathlib import Path

import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from secureml._kfp.deferred import DeferredGraph
from secureml.cli import app
from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import build_now, load_pipeline
from secureml.core.errors import InputError
from tests.support.compiled import COMPONENTS_SOURCE
from tests.support.profiles import make_profile, profile_data

NESTED = (
    COMPONENTS_SOURCE
    + '''
@dsl.pipeline(name="inner", display_name="Inner one")
def inner(x: int = 1) -> int:
    return train(x=prepare(x=x).output).output

@dsl.pipeline(name="outer", display_name="The outer pipeline", pipeline_root="gs://b/p")
def outer(x: int = 0) -> None:
    """Prepares, trains inside a nested pipeline, prepares again."""
    a = prepare(x=x)
    b = inner(x=a.output)
    prepare(x=b.output)
'''
)


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_compiled_yaml_and_report_are_those_of_kfps_build(tmp_path: Path) -> None:
    path = _file(tmp_path, "nested", NESTED)
    profile = make_profile()
    built, deferred = load_pipeline(path), load_pipeline(path, deferred=True)
    assert isinstance(deferred, DeferredGraph) and not deferred.built
    assert not isinstance(built, DeferredGraph)
    expected, got = compile_pipeline(built, profile), compile_pipeline(deferred, profile)
    assert not deferred.built  # the compiler read only the interface
    assert got.yaml_text == expected.yaml_text
    assert got.report() == expected.report()
    assert "The outer pipeline" in got.yaml_text and "gs://b/p" in got.yaml_text


def test_a_deferred_pipeline_read_is_kfps_build(tmp_path: Path) -> None:
    path = _file(tmp_path, "nested", NESTED)
    built, deferred = load_pipeline(path), load_pipeline(path, deferred=True)
    assert deferred.name == built.name and deferred.description == built.description
    assert json_format.MessageToDict(deferred.pipeline_spec) == json_format.MessageToDict(
        built.pipeline_spec
    )
    assert deferred.built
    assert deferred.platform_spec == built.platform_spec
    assert deferred.component_spec.implementation.graph == deferred.pipeline_spec


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '@dsl.pipeline(name="bad")\ndef bad(x: int = 0) -> None:\n'
            "    a = prepare(x=x)\n    prepare(y=a.output)\n",
            'TypeError: prepare() got an unexpected keyword argument "y"',
        ),
        (
            '@dsl.pipeline(name="empty")\ndef empty(x: int = 0) -> None:\n    pass\n',
            "ValueError: Task is missing from pipeline",
        ),
    ],
    ids=["in-the-function", "in-kfps-build"],
)
def test_an_error_of_the_pipeline_is_the_imports(tmp_path: Path, body: str, message: str) -> None:
    path = _file(tmp_path, "broken", COMPONENTS_SOURCE + body)
    with pytest.raises(InputError) as at_import:
        load_pipeline(path)
    deferred = load_pipeline(path, deferred=True)  # nothing traced yet
    with pytest.raises(InputError) as deferred_build:
        build_now(deferred, path)
    assert message in at_import.value.what
    assert deferred_build.value.diagnostics() == at_import.value.diagnostics()
    assert deferred_build.value.where == at_import.value.where
    assert at_import.value.where is not None and ":" in at_import.value.where.rsplit("/", 1)[-1]

    profile = tmp_path / "team.yaml"
    profile.write_text(json.dumps(profile_data()))
    result = CliRunner().invoke(
        app, ["compile", str(path), "--profile", str(profile), "-o", str(tmp_path / "o.yaml")]
    )
    assert result.exit_code == 2, result.output
    assert at_import.value.diagnostics() in result.output
    assert "Traceback" not in result.output
