"""Every Pod field of Kubernetes 1.35 and 1.37 is classified (secureml/pods/fields.py).

No control plane of those releases is built here, so their schemas are read from the release
itself: the OpenAPI v3 spec the root module `k8s.io/kubernetes` ships at
`api/openapi-spec/v3/api__v1_openapi.json` (the API server's `/openapi/v3/api/v1`), downloaded
through the Go module proxy. 1.34 and 1.36 are read from the running API servers
(tests/cluster/test_pod_fields.py).
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest

from secureml.pods import fields
from tests.harness.go_modules import module_dir
from tests.support.pod_schemas import check_classified

# The newest patch release of each that the Go module proxy served in December 2026.
RELEASES = {"1.35": "v1.35.4", "1.37": "v1.37.2"}
SPEC = "api/openapi-spec/v3/api__v1_openapi.json"
# The fields each release adds to the classified types, against 1.34 and 1.36.
NEW_FIELDS = {
    "1.35": ["PodSpec.workloadRef"],
    "1.37": ["PodSpec.evictionResponders", "VolumeMount.bindMountOptions"],
}


def _schemas(release: str) -> dict[str, Any]:
    path = module_dir(f"k8s.io/kubernetes@{RELEASES[release]}") / SPEC
    schemas: dict[str, Any] = json.loads(path.read_text())["components"]["schemas"]
    return schemas


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_pod_field_of_the_release_is_classified(release: str) -> None:
    check_classified(_schemas(release))


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_releases_new_fields_fail_until_classified(release: str) -> None:
    """Without the classification of the release's new fields, the check names them."""
    schemas = _schemas(release)
    tables = {name: dict(table) for name, table in fields.CLASSIFIED.items()}
    for new in NEW_FIELDS[release]:
        kind, field = new.split(".")
        del tables[kind][field]
    with mock.patch.dict(fields.CLASSIFIED, tables):
        assert fields.unclassified(schemas) == NEW_FIELDS[release]
