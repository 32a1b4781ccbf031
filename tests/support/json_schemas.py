"""The JSON Schemas of `--format json` (docs/schemas/, described in docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def check(name: str, document: Any) -> None:
    """Raise when `document` does not satisfy docs/schemas/<name>.schema.json."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
