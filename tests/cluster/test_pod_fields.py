"""Every Pod field of the API server's own schema is classified (secureml/pods/fields.py).

The schemas are the real API server's `/openapi/v3/api/v1` of the harness's control planes:
Kubernetes 1.36 (the session's) and 1.34 (`tests/harness/controlplane-1.34`); 1.35 and 1.37 are
read from their releases' own spec files (tests/rules/test_pod_field_releases.py). A field missing
from the table fails the test, so the next release's new fields are refused until someone decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.support.control_planes import control_plane
from tests.support.pod_schemas import check_classified


@pytest.fixture(scope="module")
def k8s_1_34() -> Iterator[ControlPlane]:
    yield from control_plane("1.34")


def _schemas(cluster: ControlPlane) -> dict[str, Any]:
    status, body = cluster.request("GET", "/openapi/v3/api/v1")
    assert status == 200, body
    schemas: dict[str, Any] = body["components"]["schemas"]
    return schemas


def test_every_pod_field_of_1_36_is_classified(k8s_cluster: ControlPlane) -> None:
    check_classified(_schemas(k8s_cluster))


def test_every_pod_field_of_1_34_is_classified(k8s_1_34: ControlPlane) -> None:
    check_classified(_schemas(k8s_1_34))
