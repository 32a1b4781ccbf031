"""`verify_inputs=`: the input artifacts whose model-signing signature the launcher verifies."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from secureml.core.errors import SecuremlError

DEFAULT_SIGNATURE = "model.sig"  # model-signing's default signature file name
EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """Where an input's model-signing signature is, relative to the input's folder."""

    signature: str = DEFAULT_SIGNATURE

    def __post_init__(self) -> None:
        if not signature_path_ok(self.signature):
            raise SecuremlError(
                f"ModelSignature(signature={self.signature!r}) is not a relative path inside the "
                "model folder",
                fix="write e.g. ModelSignature(signature='model.sig')",
            )


@dataclass(frozen=True, slots=True)
class VerifiedInput:
    """One input the launcher verifies: the component's input name and its signature file."""

    name: str
    signature: str = DEFAULT_SIGNATURE

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "signature": self.signature}


def signature_path_ok(path: object) -> bool:
    """A relative POSIX path that stays inside the folder (no `..`, not absolute, not empty)."""
    if not isinstance(path, str) or not path or path.startswith("/"):
        return False
    return ".." not in PurePosixPath(path).parts and "\\" not in path


def to_json(inputs: Sequence[VerifiedInput]) -> str:
    """The compact JSON the compiler writes (annotation and variable carry the same bytes)."""
    return json.dumps([i.to_dict() for i in inputs], separators=(",", ":"))


def from_json(text: str) -> tuple[VerifiedInput, ...]:
    """Decode `to_json`'s output; `ValueError` saying what is wrong."""
    try:
        items = json.loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(items, list) or not items:
        raise ValueError("not a non-empty JSON list")
    found: list[VerifiedInput] = []
    for item in items:
        if not isinstance(item, dict) or set(item) != {"name", "signature"}:
            raise ValueError(f"each entry is {{name, signature}}, got {item!r}")
        name, signature = item["name"], item["signature"]
        if not isinstance(name, str) or not _NAME.match(name) or not signature_path_ok(signature):
            raise ValueError(f"bad entry {item!r}")
        found.append(VerifiedInput(name, signature))
    if len({i.name for i in found}) != len(found):
        raise ValueError("an input is listed twice")
    return tuple(found)


def check_verify_inputs(
    value: object, component_spec: Any, where: str
) -> tuple[VerifiedInput, ...]:
    """The decorator's `verify_inputs=` checked against the component: each name an input
    artifact (not a parameter, not a list), and the component a Python one (the launcher reads
    the paths from KFP's executor input, which only those receive)."""
    if value is None or value == () or value == []:
        return ()
    fix = "write verify_inputs=['model'] or verify_inputs={'model': ModelSignature('model.sig')}"
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str):
        pairs = [(name, ModelSignature()) for name in value]
    else:
        raise SecuremlError(
            f"verify_inputs={value!r} is not a list or dict of input names", fix=fix, where=where
        )
    from kfp.dsl.types import type_utils

    declared = component_spec.inputs or {}
    inputs: list[VerifiedInput] = []
    for name, how in pairs:
        spec = declared.get(name) if isinstance(name, str) else None
        if spec is None:
            known = ", ".join(sorted(declared)) or "none"
            raise SecuremlError(
                f"verify_inputs names {name!r}, which is not an input of the component",
                why=f"its inputs are: {known}",
                fix=fix,
                where=where,
            )
        if type_utils.is_parameter_type(spec.type) or spec.is_artifact_list:
            raise SecuremlError(
                f"verify_inputs names {name!r}, which is a parameter or a list, not an artifact",
                why="only an input artifact (e.g. dsl.Input[dsl.Model]) is a folder with a signature",
                fix="declare it as dsl.Input[dsl.Model] (or Dataset, Artifact)",
                where=where,
            )
        if not isinstance(how, ModelSignature):
            raise SecuremlError(
                f"verify_inputs[{name!r}]={how!r} is not a ModelSignature", fix=fix, where=where
            )
        inputs.append(VerifiedInput(name, how.signature))
    container = getattr(component_spec.implementation, "container", None)
    argv = [*(getattr(container, "command", None) or []), *(getattr(container, "args", None) or [])]
    if EXECUTOR_INPUT_PLACEHOLDER not in argv:
        raise SecuremlError(
            "verify_inputs= needs a Python component",
            why="the launcher finds each input's local path in KFP's executor input, which KFP "
            "passes to Python components only (--executor_input)",
            fix="verify the model in a Python component (e.g. secureml.components.verify_model_op) "
            "before this step",
            where=where,
        )
    return tuple(inputs)
