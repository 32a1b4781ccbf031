"""Decorator mistakes a newcomer makes: every bad component of a file in one report, a did-you-mean
for a misspelt keyword, and a forgotten image= named as such (not as an image the user never wrote)."""

import textwrap
from pathlib import Path

import pytest
from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core.errors import InputError, SecuremlError
from tests.support.profiles import make_profile

IMAGE = "ghcr.io/acme/ml-images/prep@sha256:" + "1" * 64

BAD_FILE = f'''
from kfp import dsl
from secureml import secure_component

@secure_component(imgae="{IMAGE}")
def misspelt(x: int) -> int:
    return x

@secure_component(image="{IMAGE}", timeout=0)
def bad_timeout(x: int) -> int:
    return x

@secure_component(image="{IMAGE}")
def fine(x: int) -> int:
    return x

@secure_component(image="{IMAGE}", gpu="MIG")
def bad_gpu(x: int) -> int:
    return x

@dsl.pipeline(name="p")
def p() -> None:
    misspelt(x=1)
    fine(x=1)
    bad_gpu(x=1)
'''


def test_every_bad_component_of_a_file_is_reported_with_its_line(tmp_path: Path) -> None:
    file = tmp_path / "bad.py"
    file.write_text(textwrap.dedent(BAD_FILE))
    with pytest.raises(InputError) as err:
        load_pipeline(file)
    text = err.value.diagnostics()
    assert err.value.exit_code == 2
    assert f"{file}: 3 problem(s) while importing the pipeline file" in text
    assert (
        f"{file}:5: @secure_component on 'misspelt': unknown keyword(s) imgae= (did you mean image=?)"
        in text
    )
    assert f"{file}:9: @secure_component on 'bad_timeout': timeout=0" in text
    assert f"{file}:17: @secure_component on 'bad_gpu': gpu='MIG' is not a GPU request" in text
    assert "fine" not in text


def test_a_misspelt_keyword_gets_a_did_you_mean() -> None:
    with pytest.raises(SecuremlError) as err:

        @secure_component(imgae=IMAGE)
        def step(x: int) -> int:
            return x

    assert "imgae= (did you mean image=?)" in err.value.what
    with pytest.raises(SecuremlError) as err:

        @secure_component(image=IMAGE, packages_to_instal=["x"])
        def other(x: int) -> int:
            return x

    assert "did you mean packages_to_install=?" in err.value.what


@secure_component()
def no_image(x: int) -> int:
    return x


@dsl.pipeline(name="forgot-image")
def forgot_image() -> None:
    no_image(x=1)


def test_a_forgotten_image_is_named_as_kfps_default() -> None:
    with pytest.raises(CompileError) as err:
        compile_pipeline(forgot_image, make_profile())
    images = [v for v in err.value.violations if v.rule.startswith("image.")]
    assert images, err.value.diagnostics()
    for v in images:
        assert "kfp's default base image, used because the component sets no image" in v.what
        assert v.fix.startswith(
            "set image='REGISTRY/REPOSITORY@sha256:<digest>' on @secure_component"
        )


def test_a_step_without_an_image_is_warned_about_at_its_own_line() -> None:
    import warnings

    from secureml import secure_component

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @secure_component
        def no_image(x: int) -> int:
            return x

    (warning,) = [w for w in caught if "sets no image" in str(w.message)]
    assert warning.filename == __file__
    assert "image='REGISTRY/REPO@sha256:<digest>'" in str(warning.message)
    assert not [w for w in caught if "decorator.py" in w.filename]


def _plain(x: int) -> int:
    return x


def test_one_component_reports_every_problem_at_once() -> None:
    """Issue 34, point 19: a component with several bad arguments names them all in one error,
    numbered, each with its fix, instead of one per attempt."""
    with pytest.raises(SecuremlError) as caught:
        secure_component(
            image=IMAGE,
            gpu="big",
            timeout=0,
            scratch="/tmp",
            nodes=0,
            colour=1,
            trainer_runtime="",
        )(_plain)

    text = caught.value.diagnostics()
    assert text.startswith("@secure_component on '_plain': 6 problems:\n")
    for number, what in enumerate(
        [
            "unknown keyword(s) colour=",
            "gpu='big' is not a GPU request",
            "timeout=0 must be a whole number of seconds >= 1",
            "scratch='/tmp' must be a list of absolute paths",
            "nodes=0 must be a whole number >= 1",
            "trainer_runtime='' must name a ClusterTrainingRuntime",
        ],
        1,
    ):
        assert f"\n  {number}. {what}" in text
    assert "     fix: write e.g. scratch=['/workspace']" in text


def test_nodes_without_a_runtime_is_one_of_them() -> None:
    with pytest.raises(SecuremlError) as caught:
        secure_component(image=IMAGE, nodes=2, timeout=0)(_plain)

    assert "2 problems:" in caught.value.what and "\n  2. nodes=2 needs trainer_runtime=" in (
        caught.value.what
    )


def test_a_timeslice_problem_is_one_of_them() -> None:
    from secureml import TimeSlice

    with pytest.raises(SecuremlError) as caught:
        secure_component(image=IMAGE, gpu=TimeSlice(memory="16", compute=20), timeout=-1)(_plain)

    text = caught.value.diagnostics()
    assert "2 problems:" in text and "timeout=-1" in text and "memory" in text


def test_a_single_problem_reads_as_before() -> None:
    with pytest.raises(SecuremlError) as caught:
        secure_component(image=IMAGE, timeout=0)(_plain)

    assert caught.value.what == "timeout=0 must be a whole number of seconds >= 1"
