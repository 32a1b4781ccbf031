"""Every Pod field of the API server's own schema is classified (secureml/pods/fields.py).

The schemas are the real API server's `/openapi/v3/api/v1` of the harness's control planes:
Kubernetes 1.36 (the session's) and 1.34 (`tests/harness/controlplane-1.34`). No 1.35 or 1.37
control plane is built here, so those versions' schemas are not read: a field new in them is
found when their control plane joins the harness. A field missing from the table fails the test,
so the next release's new fields are refused until someone decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from secureml.pods.fields import unclassified
from secureml.pods.system_shapes import CONTAINER_SCHEMA_FIELDS, SECURITY_CONTEXT_SCHEMA_FIELDS
from tests.harness.controlplane import ControlPlane
from tests.support.control_planes import control_plane


@pytest.fixture(scope="module")
def k8s_1_34() -> Iterator[ControlPlane]:
    yield from control_plane("1.34")


def _schemas(cluster: ControlPlane) -> dict[str, Any]:
    status, body = cluster.request("GET", "/openapi/v3/api/v1")
    assert status == 200, body
    schemas: dict[str, Any] = body["components"]["schemas"]
    return schemas


def _fields(schemas: dict[str, Any], name: str) -> set[str]:
    return set(schemas[f"io.k8s.api.core.v1.{name}"]["properties"])


def _check(schemas: dict[str, Any]) -> None:
    assert unclassified(schemas) == []
    # The system containers' shape names every Container and SecurityContext field it refuses.
    containers = _fields(schemas, "Container") | _fields(schemas, "EphemeralContainer")
    assert containers <= set(CONTAINER_SCHEMA_FIELDS)
    assert _fields(schemas, "SecurityContext") <= set(SECURITY_CONTEXT_SCHEMA_FIELDS)


def test_every_pod_field_of_1_36_is_classified(k8s_cluster: ControlPlane) -> None:
    _check(_schemas(k8s_cluster))


def test_every_pod_field_of_1_34_is_classified(k8s_1_34: ControlPlane) -> None:
    _check(_schemas(k8s_1_34))
