"""The doctor pipeline's two steps (secureml.remoterun.smoke). No `from __future__ import
annotations` here: kfp reads the components' parameter types when they are made."""

from typing import Any


def build(image: str, name: str, description: str) -> Any:
    """The pipeline `name`: `hello` returns a word, `check` fails unless it received it."""
    from kfp import dsl

    from secureml.compile.decorator import secure_component

    @secure_component(image=image)  # type: ignore[untyped-decorator]
    def hello() -> str:
        return "secureml"

    @secure_component(image=image)  # type: ignore[untyped-decorator]
    def check(word: str) -> None:
        if word != "secureml":
            raise SystemExit(f"the word passed between the steps is {word!r}, not 'secureml'")

    @dsl.pipeline(name=name, description=description)  # type: ignore[untyped-decorator]
    def doctor() -> None:
        check(word=hello().output)

    return doctor
