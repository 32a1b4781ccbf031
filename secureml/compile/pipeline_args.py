"""Pipeline arguments checked against a compiled pipeline's parameters before anything runs."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from secureml.core.errors import InputError


def _to_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(raw)


def _to_json(kind: type) -> Callable[[str], Any]:
    def convert(raw: str) -> Any:
        value = json.loads(raw)
        if not isinstance(value, kind):
            raise ValueError(raw)
        return value

    return convert


# KFP's parameterType -> (the word a user knows, converter from text, check of a Python value)
_TYPES: dict[str, tuple[str, Callable[[str], Any], Callable[[Any], bool]]] = {
    "STRING": ("str", str, lambda v: isinstance(v, str)),
    "NUMBER_INTEGER": (
        "int",
        int,
        lambda v: isinstance(v, int) and not isinstance(v, bool),
    ),
    "NUMBER_DOUBLE": (
        "float",
        float,
        lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    ),
    "BOOLEAN": ("bool (true or false)", _to_bool, lambda v: isinstance(v, bool)),
    "LIST": ("list (JSON)", _to_json(list), lambda v: isinstance(v, list)),
    "STRUCT": ("dict (JSON object)", _to_json(dict), lambda v: isinstance(v, dict)),
}


def _describe(name: str, spec: Mapping[str, Any]) -> str:
    kind = _TYPES.get(str(spec.get("parameterType")), (str(spec.get("parameterType")),))[0]
    if spec.get("isOptional") or "defaultValue" in spec:
        default = spec.get("defaultValue")
        if spec.get("parameterType") == "NUMBER_INTEGER" and isinstance(default, float):
            default = int(default)  # the compiled spec holds every number as a JSON double
        return f"{name} ({kind}, default {json.dumps(default)})"
    return f"{name} ({kind}, required)"


def bind_arguments(
    pipeline_spec: Mapping[str, Any], arguments: Mapping[str, Any], *, pipeline: str
) -> dict[str, Any]:
    """`arguments` converted to the types the pipeline declares; `InputError` naming every problem.

    A `str` value for a non-text parameter is read as that type (`--arg lr=0.1`, `--arg flag=true`,
    `--arg items='[1, 2]'`); any other value must already have the declared type.
    """
    parameters: dict[str, Any] = (
        pipeline_spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    )
    problems: list[str] = []
    bound: dict[str, Any] = {}
    for name, value in arguments.items():
        spec = parameters.get(name)
        if spec is None:
            problems.append(f"{name!r} is not a parameter of the pipeline")
            continue
        kind, convert, accepts = _TYPES.get(
            str(spec.get("parameterType")), ("any", str, lambda v: True)
        )
        if isinstance(value, str) and kind != "str":
            try:
                bound[name] = convert(value)
            except ValueError:
                problems.append(
                    f"{name}={value!r}: {name} is declared as {kind}, and this is not one"
                )
            continue
        if not accepts(value):
            problems.append(
                f"{name}={value!r}: {name} is declared as {kind}, not {type(value).__name__}"
            )
            continue
        bound[name] = value
    missing = [
        name
        for name, spec in parameters.items()
        if name not in arguments and not spec.get("isOptional") and "defaultValue" not in spec
    ]
    problems += [f"required parameter {name!r} has no value" for name in missing]
    if problems:
        declared = ", ".join(_describe(n, s) for n, s in sorted(parameters.items())) or "none"
        raise InputError(
            f"pipeline {pipeline}: " + "; ".join(problems),
            why="a run needs a value of the declared type for each parameter it has",
            fix=f"pass --arg NAME=VALUE for the pipeline's parameters: {declared}",
        )
    return bound
