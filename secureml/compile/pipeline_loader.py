"""Import a user's pipeline file and pick the pipeline to compile, with errors a person can act on."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.compile.decorator_errors import ComponentNotBuiltError, collecting
from secureml.core.errors import InputError, SecuremlError

if TYPE_CHECKING:
    from kfp.dsl.base_component import BaseComponent
    from kfp.dsl.graph_component import GraphComponent


def load_pipeline(
    path: str | Path, name: str | None = None, *, deferred: bool = False
) -> GraphComponent:
    """The `@dsl.pipeline` object in the Python file `path`.

    With one pipeline in the file, that one; with several, the one whose Python name or pipeline
    name is `name`. Pipelines that only serve as nested pipelines of another are not counted.
    `deferred`: kfp builds the file's pipelines only when something reads them
    (`secureml._kfp.deferred`; for `compile_pipeline`, which builds its own); where compiling one
    then fails, `build_now` reports what its build at import would have.
    """
    file = Path(path)
    found = pipelines_in(file, deferred=deferred)
    if name is not None:
        for attr, value in found.items():
            if name in (attr, value.name):
                return value
        raise InputError(
            f"{file} has no pipeline named {name!r}",
            fix="use one of: " + ", ".join(sorted(found)),
            where=str(file),
        )
    candidates = top_level(found)
    if len(candidates) > 1:
        raise InputError(
            f"{file} defines {len(candidates)} pipelines",
            fix="choose one with --pipeline NAME: " + ", ".join(sorted(candidates)),
            where=str(file),
        )
    return next(iter(candidates.values()))


def pipelines_in(path: str | Path, *, deferred: bool = False) -> dict[str, GraphComponent]:
    """Every `@dsl.pipeline` object the Python file `path` defines or imports, by Python name.

    The file's folder is put first on `sys.path` while it is imported, so sibling modules import as
    they do when the file is run. Raise `InputError` when the import fails or finds no pipeline.
    `deferred`: as in `load_pipeline`.
    """
    from kfp.dsl.base_component import BaseComponent
    from kfp.dsl.graph_component import GraphComponent

    file = Path(path)
    if not file.is_file():
        raise InputError(
            f"pipeline file {file} does not exist",
            fix="pass the path of a .py file with a @dsl.pipeline",
        )
    if file.suffix.lower() in (".yaml", ".yml", ".json"):
        raise _compiled_pipeline_error(file)
    module_name = "_secureml_pipeline_" + "".join(ch if ch.isalnum() else "_" for ch in file.stem)
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise InputError(
            f"cannot import {file}", why="it is not a Python source file", fix="pass a .py file"
        )
    module = importlib.util.module_from_spec(spec)
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[module_name] = module  # kept: kfp and dataclasses look a function's module up
    try:
        if deferred:
            from secureml._kfp.deferred import HOOK, deferred_code, deferring

            code = deferred_code(file.read_bytes(), spec.origin or str(file))
            vars(module)[HOOK] = deferring
            _run_user_code(file, functools.partial(exec, code, vars(module)))
        else:
            _run_user_code(file, functools.partial(spec.loader.exec_module, module))
    finally:
        sys.path.remove(folder)

    found = {
        attr: value for attr, value in vars(module).items() if isinstance(value, GraphComponent)
    }
    problems: list[str] = []
    if (
        not found
    ):  # a component file: each component becomes a one-step pipeline, as kfp compiles it
        for attr, value in vars(module).items():
            if isinstance(value, BaseComponent):
                try:
                    found[attr] = as_pipeline(value)
                except (TypeError, ValueError) as err:
                    problems.append(f"{attr}: {err}")
    if problems and not found:
        raise InputError(
            f"{file} has components but none can run as a pipeline on its own",
            why="; ".join(problems),
            fix="compile a pipeline that uses them",
            where=str(file),
        )
    if not found:
        raise InputError(
            f"{file} defines no pipeline or component",
            fix="decorate the pipeline function with @dsl.pipeline",
            where=str(file),
        )
    return found


def build_now(graph: GraphComponent, path: str | Path) -> None:
    """kfp's build of a pipeline `load_pipeline(..., deferred=True)` has not built yet, with the
    errors its build at import gave (`InputError`, where in `path` it failed)."""
    from secureml._kfp.deferred import DeferredGraph

    if isinstance(graph, DeferredGraph) and not graph.built:
        # the frames above the build are those of the import that made the pipeline
        _run_user_code(Path(path), graph.build, outer=graph.created_at)


def _run_user_code(
    file: Path, run: Callable[[], object], outer: Sequence[traceback.FrameSummary] = ()
) -> None:
    """Run the user's code of `file` (its import, or a deferred pipeline build below the
    `outer` frames): an exception it raises, and the components it could not make, as one
    `InputError` naming where (the innermost line of `file`)."""
    with collecting() as bad_components:
        try:
            run()
        except ComponentNotBuiltError:
            pass  # a pipeline used a bad component: that component's error is reported below
        except Exception as err:  # noqa: BLE001 - the user's code may raise anything: report where it failed, without our frames
            frames = [
                f
                for f in [*outer, *traceback.extract_tb(err.__traceback__)]
                if f.filename == str(file.resolve())
            ]
            line = f":{frames[-1].lineno}" if frames else ""
            failed = InputError(
                f"importing the pipeline failed: {type(err).__name__}: {err}",
                why="the file raised while it was imported (kfp traces pipelines at import time)",
                fix="run `python " + str(file) + "` to see the full error, and fix it",
                where=f"{file}{line}",
            )
            if not bad_components:
                raise failed from None
            bad_components.append(failed)
    if bad_components:
        raise _bad_components(file, bad_components)


def _bad_components(file: Path, errors: list[SecuremlError]) -> InputError:
    """One error naming every component of `file` that could not be made, each with its line."""
    listing = "\n".join("  " + "\n    ".join(err.diagnostics().splitlines()) for err in errors)
    return InputError(
        f"{file}: {len(errors)} problem(s) while importing the pipeline file\n{listing}",
        fix="correct each one as shown",
    )


def as_pipeline(component: BaseComponent) -> GraphComponent:
    """A one-task pipeline around a lone component (its inputs become the pipeline's inputs)."""
    from kfp.dsl import structures
    from kfp.dsl.graph_component import GraphComponent

    names = list(component.component_spec.inputs or {})

    def single(*args: Any) -> None:
        component(**dict(zip(names, args, strict=False)))

    single.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names]
    )
    spec = structures.ComponentSpec(
        name=component.component_spec.name,
        description=component.component_spec.description,
        inputs=component.component_spec.inputs,
        implementation=structures.Implementation(),
    )
    return GraphComponent(spec, single)


def top_level(found: dict[str, GraphComponent]) -> dict[str, GraphComponent]:
    """The pipelines of `found` that no other one of them uses as a nested pipeline."""
    from secureml._kfp.deferred import spec_of

    nested = {id(spec_of(inner)) for value in found.values() for inner in _inner(value)}
    top = {attr: value for attr, value in found.items() if id(spec_of(value)) not in nested}
    return top or found


def _inner(pipeline: GraphComponent) -> list[GraphComponent]:
    from secureml._kfp.deferred import referenced_graphs

    return [g for g in referenced_graphs(pipeline.pipeline_func) if g is not pipeline]


def _compiled_pipeline_error(file: Path) -> InputError:
    """`secureml compile pipeline.yaml`: what to do instead, plainly."""
    return InputError(
        "this is a compiled pipeline (YAML or JSON), not a pipeline's Python source",
        why="secureml compiles from the @dsl.pipeline function: the compiled file no longer says "
        "what @secure_component adds to each step (its GPU request, its pinned and signed image, "
        "the launcher), and re-securing a finished YAML would skip kfp's own compile",
        fix="run secureml compile on the .py file that defines the pipeline; for a component you "
        "only have as YAML, load it with kfp.components.load_component_from_file(...) in a "
        "pipeline file and wrap it with @secure_component(gpu=...) there",
        where=str(file),
    )
