"""Decorator mistakes a newcomer makes: every bad component of a file in one report, a did-you-mean
for a misspelt keyword, and a forgotten image= named as such (not as an image the user never wrote)."""

import textwrap
from pathlib import Path

import pytest
from compilerhelp import make_profile
from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core.errors import InputError, SecuremlError

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
