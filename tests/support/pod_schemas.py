"""The check that a release's Pod schema (OpenAPI v3 `components.schemas`) is fully classified."""

from __future__ import annotations

from typing import Any

from secureml.pods.fields import unclassified
from secureml.pods.system_shapes import CONTAINER_SCHEMA_FIELDS, SECURITY_CONTEXT_SCHEMA_FIELDS


def fields_of(schemas: dict[str, Any], name: str) -> set[str]:
    """The fields of the core/v1 type `name` in `schemas`."""
    return set(schemas[f"io.k8s.api.core.v1.{name}"]["properties"])


def check_classified(schemas: dict[str, Any]) -> None:
    """Every Pod field is in secureml/pods/fields.py, and the system containers' shape names every
    Container and SecurityContext field it refuses."""
    assert unclassified(schemas) == []
    containers = fields_of(schemas, "Container") | fields_of(schemas, "EphemeralContainer")
    assert containers <= set(CONTAINER_SCHEMA_FIELDS)
    assert fields_of(schemas, "SecurityContext") <= set(SECURITY_CONTEXT_SCHEMA_FIELDS)
