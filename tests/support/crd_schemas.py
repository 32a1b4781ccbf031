"""CRD structural schemas as strict JSON Schema, for validating objects against a CRD."""

from __future__ import annotations

from typing import Any


def strict_schema(schema: Any) -> Any:
    """A CRD structural schema as JSON Schema that rejects fields the CRD does not declare."""
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_schema(value) for key, value in schema.items()}
    if (
        out.get("type") == "object"
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
        and "properties" in out
    ):
        out["additionalProperties"] = False
    pattern = out.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):  # Go allows the flag after ^
        out["pattern"] = "(?i)^" + pattern[len("^(?i)") :]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out
