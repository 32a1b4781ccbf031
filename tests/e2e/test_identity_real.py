"""Identity on the real node, in running containers (tests/e2e/conftest.py: SPIRE's agent with the
`k8s` workload attestor, the SPIFFE CSI driver, spire-controller-manager and the tenant's rendered
ClusterSPIFFEID).

- A pod outside the tenant claiming a step's identity: the `prep` pod as the server stores it
  (runtime injected, the SPIFFE socket mounted, the step's labels and expected SPIFFE ID), reduced
  to the platform's runtime and its launcher, run in a namespace the ClusterSPIFFEID does not
  select. The agent answers on the socket but issues it nothing, and the launcher fails closed
  (exit 71) with a record that says why; the step never runs.
- The SPIRE agent stopped while a pipeline runs: the next step's launcher finds no Workload API and
  fails closed (exit 71, the record says why); with the agent back the same step gets its SVID.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from secureml.core import contract
from tests.e2e import stepruns
from tests.e2e.environment import E2E

pytestmark = [pytest.mark.node, pytest.mark.cluster]

STEP_RAN = "STEP-RAN"


@pytest.fixture(scope="module")
def compiled(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> stepruns.Compiled:
    return stepruns.compile_pods(e2e, tmp_path_factory.mktemp("compile"))


def _identity_failed(ran: stepruns.Ran) -> dict[str, Any]:
    assert ran.pod["status"]["phase"] == "Failed", ran.explain()
    assert ran.main_exit_code == 71, ran.explain()  # ExitCode.IDENTITY
    assert STEP_RAN not in ran.log, ran.log
    record = ran.record()
    stages = ran.stages()
    assert stages["identity"]["status"] == "failed", stages["identity"]
    assert stages["run"]["status"] == "skipped", stages["run"]
    assert not record.get("spiffe_id"), record
    print(f"\nidentity stage: {stages['identity']}")
    return stages["identity"]


def test_a_pod_outside_the_tenant_gets_no_svid_and_the_launcher_fails_closed(
    e2e: E2E, compiled: stepruns.Compiled
) -> None:
    namespace = f"team-b-{uuid.uuid4().hex[:6]}"
    e2e.cluster.create_namespace(namespace, {"pod-security.kubernetes.io/enforce": "restricted"})
    pod = compiled.pod("prep", "foreign-prep", mutated=True)
    pod["metadata"]["namespace"] = namespace
    account = pod["spec"]["serviceAccountName"]
    status, answer = e2e.cluster.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
    )
    assert status == 201, answer
    # Only the platform's runtime and its launcher: no Argo or KFP container (the namespace has
    # none of their objects), the step a print that must never run.
    spec = pod["spec"]
    spec["initContainers"] = [
        c for c in spec["initContainers"] if c["name"] == contract.RUNTIME_INIT_CONTAINER
    ]
    main = stepruns.main_container(pod)
    spec["containers"] = [main]
    main["command"] = [*contract.RUNTIME_LAUNCHER_PREFIX, "python3", "-c", f"print('{STEP_RAN}')"]
    main["args"] = []
    labels = pod["metadata"]["labels"]
    assert labels[contract.LABEL_TENANT] == "team-a"  # it claims team-a's prep identity
    expected = pod["metadata"]["annotations"][contract.ANNOTATION_SPIFFE_ID]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["secureml-spiffe"]["csi"]["driver"] == "csi.spiffe.io"  # the socket is there

    ran = stepruns.run(e2e, pod, "prep", namespace=namespace)
    stage = _identity_failed(ran)
    assert ran.record()["expected_spiffe_id"] == expected
    # the agent answered and refused (PermissionDenied: no identity issued), not a missing socket
    assert "no identity issued" in str(stage).lower() or "permission" in str(stage).lower(), stage


def test_the_agent_stopped_mid_run_fails_the_next_step_closed(
    e2e: E2E, compiled: stepruns.Compiled
) -> None:
    spire = e2e.node.identity
    assert spire is not None, "the e2e node runs without SPIRE"
    with spire.agent_stopped():
        assert not spire.agent_socket.exists()
        ran = stepruns.run(e2e, compiled.pod("prep", "prep-agent-down"), "prep")
        stage = _identity_failed(ran)
        print(f"prep with the agent down: {ran.pod['status']['phase']} in {ran.seconds:.1f} s")
    # the control: the same step, the agent back, gets its ID and runs
    again = stepruns.run(e2e, compiled.pod("prep", "prep-agent-back"), "prep")
    assert again.pod["status"]["phase"] == "Succeeded", again.explain()
    record = again.record()
    assert record["spiffe_id"] == record["expected_spiffe_id"], record
    assert stage["status"] == "failed"
