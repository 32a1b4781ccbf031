"""Import a user's pipeline file and pick the pipeline to compile, with errors a person can act on."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from secureml.errors import InputError

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent


def load_pipeline(path: str | Path, name: str | None = None) -> GraphComponent:
    """The `@dsl.pipeline` object in the Python file `path`.

    With one pipeline in the file, that one; with several, the one whose Python name or pipeline
    name is `name`. The file's folder is put first on `sys.path` while it is imported, so sibling
    modules import as they do when the file is run.
    """
    from kfp.dsl.graph_component import GraphComponent

    file = Path(path)
    if not file.is_file():
        raise InputError(f"pipeline file {file} does not exist", fix="pass the path of a .py file with a @dsl.pipeline")
    module_name = "_secureml_pipeline_" + "".join(ch if ch.isalnum() else "_" for ch in file.stem)
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise InputError(f"cannot import {file}", why="it is not a Python source file", fix="pass a .py file")
    module = importlib.util.module_from_spec(spec)
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[module_name] = module  # kept: kfp and dataclasses look a function's module up
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's code: report where it failed, without our frames
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == str(file.resolve())]
        line = f":{frames[-1].lineno}" if frames else ""
        raise InputError(
            f"importing the pipeline failed: {type(err).__name__}: {err}",
            why="the file raised while it was imported (kfp traces pipelines at import time)",
            fix="run `python " + str(file) + "` to see the full error, and fix it",
            where=f"{file}{line}",
        ) from None
    finally:
        sys.path.remove(folder)

    found = {attr: value for attr, value in vars(module).items() if isinstance(value, GraphComponent)}
    if not found:
        raise InputError(f"{file} defines no pipeline", fix="decorate the pipeline function with @dsl.pipeline",
                         where=str(file))
    if name is not None:
        for attr, value in found.items():
            if name in (attr, value.name):
                return value
        raise InputError(
            f"{file} has no pipeline named {name!r}",
            fix="use one of: " + ", ".join(sorted(found)),
            where=str(file),
        )
    # Pipelines used inside another one (nested) are not candidates on their own.
    nested = {id(inner.component_spec) for value in found.values() for inner in _inner(value)}
    top = {attr: value for attr, value in found.items() if id(value.component_spec) not in nested}
    candidates = top or found
    if len(candidates) > 1:
        raise InputError(
            f"{file} defines {len(candidates)} pipelines",
            fix="choose one with --pipeline NAME: " + ", ".join(sorted(candidates)),
            where=str(file),
        )
    return next(iter(candidates.values()))


def _inner(pipeline: GraphComponent) -> list[GraphComponent]:
    from secureml.compiler import referenced_graphs

    return [g for g in referenced_graphs(pipeline.pipeline_func) if g is not pipeline]
