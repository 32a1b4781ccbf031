"""Issue 34, point 25: an `oci://` model importer (KFP's modelcar) is refused at compile time,
naming the task, because KFP's driver would run the model image as a sidecar that admission
refuses (`secureml.modelcar`, docs/threat-model.md T40); other importers compile."""

import pytest
from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from tests.support.compiled import IMAGE
from tests.support.profiles import make_profile

MODEL = (
    "oci://ghcr.io/acme/models/llama@sha256:"
    + "7f83b1657ff1fc53b92dc18148a1d65dfc2d4b1fa3d677284addd200126d9069"
)


@secure_component(image=IMAGE)
def serve(model: dsl.Input[dsl.Model]) -> int:
    return 1


def _pipeline(uri: str):  # type: ignore[no-untyped-def]
    @dsl.pipeline(name="modelcar")
    def pipeline() -> None:
        weights = dsl.importer(artifact_uri=uri, artifact_class=dsl.Model).set_display_name("w")
        serve(model=weights.output)

    return pipeline


def test_an_oci_importer_is_refused_naming_the_task_and_the_fix() -> None:
    with pytest.raises(CompileError) as caught:
        compile_pipeline(_pipeline(MODEL), make_profile())
    (violation,) = caught.value.violations
    assert violation.rule == "model.oci-sidecar"
    assert violation.task == "importer"
    assert MODEL in violation.what and "secureml.modelcar" in violation.what
    assert "s3://" in violation.fix and "verify_inputs=" in violation.fix
    assert "importer: [model.oci-sidecar]" in caught.value.what


def test_an_importer_from_the_artifact_store_compiles() -> None:
    compiled = compile_pipeline(_pipeline("s3://models/llama"), make_profile())
    assert "s3://models/llama" in compiled.yaml_text


def test_an_importer_uri_from_a_parameter_is_left_to_admission() -> None:
    """Known only at run time: the sidecar pod KFP's driver writes is refused then."""

    @dsl.pipeline(name="modelcar-parameter")
    def pipeline(uri: str = MODEL) -> None:
        weights = dsl.importer(artifact_uri=uri, artifact_class=dsl.Model)
        serve(model=weights.output)

    compiled = compile_pipeline(pipeline, make_profile())
    assert "importer" in compiled.yaml_text
