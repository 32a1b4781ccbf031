"""The `k8s_node` fixture: a real node (tests/harness/node.py) with a control plane of its own.

The node runs SPIRE's agent with the SPIFFE CSI driver and kube-network-policies too
(tests/harness/node_identity.py, node_netpol.py). Session-scoped, one per test process (under xdist each worker that runs a node test starts its own,
on its own node slot). The control plane is started bound to the slot's address, so pods reach it,
without the CRDs (no node test needs them yet: ~1 s instead of ~8). Where the node cannot run here
(no root, no Go, a Debian package missing: `make deps`) it skips saying why, except under CI=true,
where it fails, as `k8s_cluster` does; a start failure once everything is there fails everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness import controlplane
from tests.harness.controlplane import HarnessError
from tests.harness.node import (
    MODULES,
    binaries,
    missing_requirements,
    module_binaries,
    running_cluster_with_node,
)
from tests.support.node_pods import NodeCluster


@pytest.fixture(scope="session")
def k8s_node() -> Iterator[NodeCluster]:
    try:
        missing = missing_requirements()
        if missing:
            raise HarnessError("the test node needs " + "; ".join(missing))
        controlplane.binaries()
        binaries()
        for module in MODULES:  # SPIRE, the CSI driver, kube-network-policies
            module_binaries(module)
    except HarnessError as error:
        reason = f"no test node: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with running_cluster_with_node() as (cluster, node):
        yield NodeCluster(cluster, node)
