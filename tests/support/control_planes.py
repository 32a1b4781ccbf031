"""`control_plane`: a started test control plane for a fixture to yield (tests/conftest.py's
`k8s_cluster` and `own_k8s_cluster`, and modules that start one per Kubernetes version).

A module of its own, not conftest.py: several test folders have a conftest.py, so `from conftest
import ...` resolves to whichever pytest imported first under xdist.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.controlplane import CRDS, ControlPlane, HarnessError, binaries


def control_plane(version: str = "1.36") -> Iterator[ControlPlane]:
    """A started ControlPlane of Kubernetes `version` for a fixture to yield; skips (fails under
    CI=true) when the harness cannot be built or the real CRDs it installs are absent (a checkout
    without ../shared/fixtures)."""
    try:
        if not CRDS.is_dir():
            raise HarnessError(f"{CRDS} is absent: the real CRDs come from ../shared/fixtures/crds")
        binaries(version)
    except HarnessError as error:
        reason = f"no test control plane: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with ControlPlane(version=version) as cluster:  # a start failure fails everywhere: Go is there
        yield cluster
