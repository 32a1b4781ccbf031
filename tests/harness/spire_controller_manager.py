"""SPIRE's controller manager for tests: turns ClusterSPIFFEIDs and pods into registration entries.

spire-controller-manager v0.6.4 (tests/harness/spire-controller-manager, built by
`tests/harness/build.sh spire-controller-manager`) runs against the test API server
(tests/harness/controlplane.py) and the test SPIRE server (tests/harness/spire.py, through its
local admin socket). Its admission webhook is off (`ENABLE_WEBHOOKS=false`: the API server would
need to reach it over TLS), and so are leader election, metrics and health listeners. Everything
else is as in a cluster: for each pod that a ClusterSPIFFEID selects and that is bound to a node, it
creates an entry whose SPIFFE ID is the rendered template, whose parent is the node's agent
(`spiffe://<td>/spire/agent/k8s_psat/<cluster>/<node uid>`) and whose one selector is the pod's
UID (`k8s:pod-uid:...`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.built import HarnessError, built
from tests.harness.spire import Spire, SpireError, _die_with_parent

CLUSTER_NAME = "secureml-test"


def build_controller_manager() -> Path:
    """The spire-controller-manager binary (built once per machine by build.sh)."""
    try:
        return built("spire-controller-manager", ("spire-controller-manager",)) / (
            "spire-controller-manager"
        )
    except HarnessError as error:
        raise SpireError(str(error)) from error


class ControllerManager:
    """One spire-controller-manager for `spire`'s server, watching the cluster of `kubeconfig`."""

    def __init__(self, binary: Path, spire: Spire, kubeconfig: Path) -> None:
        self.binary = binary
        self.spire = spire
        self.kubeconfig = kubeconfig
        self.folder = spire.root / "controller-manager"
        self._proc: subprocess.Popen[bytes] | None = None

    def parent_id(self, node_uid: str) -> str:
        """The SPIFFE ID of the agent on the node with `node_uid`: every pod entry's parent."""
        return f"spiffe://{self.spire.trust_domain}/spire/agent/k8s_psat/{CLUSTER_NAME}/{node_uid}"

    def start(self) -> ControllerManager:
        self.folder.mkdir(exist_ok=True)
        config = {
            "apiVersion": "spire.spiffe.io/v1alpha1",
            "kind": "ControllerManagerConfig",
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "validatingWebhookConfigurationName": "spire-controller-manager-webhook",
            "clusterName": CLUSTER_NAME,
            "trustDomain": self.spire.trust_domain,
            "spireServerSocketPath": str(self.spire.server_socket),
            "ignoreNamespaces": ["kube-system", "kube-public"],
            # Without a prefix it owns every entry of the server and deletes those no
            # ClusterSPIFFEID renders: the identity tests' entries on the same SPIRE.
            "entryIDPrefix": "secureml-test",
            # The fixture CRDs are SPIRE's ClusterSPIFFEID only (what secureml renders); the
            # federation and static-entry controllers would wait for CRDs that are not there.
            "reconcile": {
                "clusterSPIFFEIDs": True,
                "clusterFederatedTrustDomains": False,
                "clusterStaticEntries": False,
            },
        }
        (self.folder / "config.json").write_text(json.dumps(config))  # JSON is YAML
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "ENABLE_WEBHOOKS": "false"}
        with (self.folder / "controller-manager.log").open("ab") as log:
            self._proc = subprocess.Popen(
                [str(self.binary), "-config", str(self.folder / "config.json")],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_for_entry(self, spiffe_id: str, timeout_s: float = 60.0) -> dict[str, object]:
        """The server's entry for `spiffe_id` once the controller manager has created it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise SpireError(f"spire-controller-manager exited:\n{self.log()}")
            for entry in self.spire.list_entries():
                if _spiffe_id(entry) == spiffe_id:
                    return entry
            time.sleep(0.2)
        raise SpireError(f"no entry for {spiffe_id} after {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        path = self.folder / "controller-manager.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    def close(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)


def _spiffe_id(entry: dict[str, object]) -> str:
    """`spiffe://td/path` from an entry of `spire-server entry show -output json`."""
    value = entry["spiffe_id"]
    assert isinstance(value, dict)
    return f"spiffe://{value['trust_domain']}{value['path']}"
