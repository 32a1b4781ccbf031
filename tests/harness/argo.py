"""Argo Workflows' own workflow-controller for the tests: Workflows run on the real node.

KFP 2.17's backend pins `github.com/argoproj/argo-workflows/v4` v4.0.5 (tests/harness/e2e/go.mod
names it); `tests/harness/build.sh e2e` builds its `workflow-controller` in the same scratch copy of
the module as `argoexec`. Nothing of Argo is kept in the repository: the CRDs and the controller's
RBAC are read from the module in the Go module cache (`module_folder()`).

`WorkflowController(cluster)` (a context manager; `start()` / `stop()`) installs, on a harness
`ControlPlane`:

- Argo's CRDs (`manifests/base/crds/minimal`, as Argo's own quick start installs them);
- the namespace `argo` with the service account `argo`, and Argo's ClusterRole `argo-cluster-role`
  and Role `argo-role` (`manifests/cluster-install-no-crds/workflow-controller-rbac`) bound to it;
- the `workflow-controller-configmap` with the executor KFP 2.17 installs (`EXECUTOR`: the emissary
  image `quay.io/argoproj/argoexec:v4.0.5`, which tests/harness/kfp_images.py serves from the
  session's registry under that name, `imagePullPolicy: IfNotPresent`, KFP's hardened
  securityContext), metrics off (a fixed port every controller on this machine would share), no
  artifact repository (KFP v2 moves artifacts in its launcher; KFP's own configmap also archives
  logs to its MinIO, which does not run here);

then runs `workflow-controller` as a process of this machine (not a pod: there is no image of it and
nothing here needs one) with a kubeconfig of its own: a client certificate in the name of the
service account `argo`, so the API server's RBAC gives it exactly Argo's roles. Leader election is
off (one controller per control plane). There is no Argo server and no UI.

A Workflow's pods run under its `serviceAccountName`; Argo's executor in them (`wait`) writes the
step's `WorkflowTaskResult`, which the account must be allowed to create and patch: the tenant's
bundle grants that to `secureml-pipeline-runner` (secureml.bundle.rbac); `grant_executor` gives a
namespace without the bundle Argo's own minimal executor Role (`manifests/quick-start/base/
executor/emissary/executor-role.yaml`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from .controlplane import ControlPlane, HarnessError, _ours, _terminate
from .go_modules import module_dir
from .kfp_images import ARGOEXEC_IMAGE, binaries, mirror_kfp_registries, push_kfp_images
from .kubernetes_service import ServiceRoute
from .node import Node, _kubeconfig, _sign
from .service import Service

MODULE = "github.com/argoproj/argo-workflows/v4@v4.0.5"
# Where KFP's manifests deploy Argo's controller, and its account: the creator of step pods that a
# profile's `identity.pipelineRunners` admits by default (secureml.pipelineIdentity).
NAMESPACE = "kubeflow"
ACCOUNT = "argo"
CONFIGMAP = "workflow-controller-configmap"
CRD_FOLDER = "manifests/base/crds/minimal"
CONTROLLER_RBAC = (
    "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-controller-clusterrole.yaml",
    "manifests/cluster-install-no-crds/workflow-controller-rbac/workflow-controller-role.yaml",
)
EXECUTOR_ROLE = "manifests/quick-start/base/executor/emissary/executor-role.yaml"
STATE_FILE = "argo.json"
# The executor KFP 2.17.0 configures (its workflow-controller-configmap-patch.yaml and the
# deployment patch's --executor-image): what secureml.pods.argo models.
EXECUTOR: dict[str, Any] = {
    "image": ARGOEXEC_IMAGE,
    "imagePullPolicy": "IfNotPresent",
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}
DONE = ("Succeeded", "Failed", "Error")
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_WORKFLOWS = "/apis/argoproj.io/v1alpha1/namespaces/{namespace}/workflows"
_STARTED = "Starting Workflow Controller"  # its log line once the informers are set up


def _killed_with_parent() -> None:
    """In the child: SIGKILL when the test process dies. Not SIGTERM, as for the control plane:
    the controller shuts down gracefully on SIGTERM, and with its API server gone at the same
    moment it never finished (seen after a killed test run)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def module_folder() -> Path:
    """Argo's module in the Go module cache (downloaded through the module proxy if absent)."""
    return module_dir(MODULE)


def manifests(relative: str) -> list[dict[str, Any]]:
    """The YAML documents of one file (or every file of a folder) of Argo's module."""
    path = module_folder() / relative
    files = sorted(path.glob("argoproj.io_*.yaml")) if path.is_dir() else [path]
    return [doc for file in files for doc in yaml.safe_load_all(file.read_text()) if doc]


def controller_binary() -> Path:
    """`workflow-controller`, built by `build.sh e2e` beside argoexec."""
    binary = binaries() / "workflow-controller"
    if not os.access(binary, os.X_OK):
        raise HarnessError(f"{binary} is missing: tests/harness/build.sh e2e builds it")
    return binary


class WorkflowController(Service):
    """Argo's workflow-controller for `cluster`; its files (kubeconfig, log) in `directory`."""

    def __init__(self, cluster: ControlPlane, directory: Path | None = None) -> None:
        self.cluster = cluster
        self._owns_directory = directory is None
        self.directory = (
            Path(directory) if directory else Path(tempfile.mkdtemp(prefix="secureml-argo-"))
        )
        self._process: subprocess.Popen[bytes] | None = None
        self.started_in_s = 0.0

    @property
    def log_path(self) -> Path:
        return self.directory / "workflow-controller.log"

    def log(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, *, detach: bool = False, timeout_s: float = 60.0, route: str = "") -> None:
        """Install Argo's objects, start the controller, wait until it watches Workflows.

        `detach` starts it in its own session so that it outlives this process (`up`, which
        names the nftables table of its Service `route` for `down` to remove)."""
        began = time.monotonic()
        binary = controller_binary()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._install(began + timeout_s)
            kubeconfig = self._write_kubeconfig()
            with self.log_path.open("wb") as log:
                self._process = subprocess.Popen(
                    [str(binary), f"--kubeconfig={kubeconfig}", f"--namespace={NAMESPACE}",
                     f"--configmap={CONFIGMAP}", f"--executor-image={ARGOEXEC_IMAGE}"],
                    env={**os.environ, "LEADER_ELECTION_DISABLE": "true"},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=detach,
                    preexec_fn=None if detach else _killed_with_parent,
                )  # fmt: skip
            self._wait_started(began + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        state = {"pid": self._process.pid, "route": route}
        (self.directory / STATE_FILE).write_text(json.dumps(state) + "\n")

    def stop(self) -> None:
        if self._process is not None:
            _terminate(self._process.pid, self._process)
            self._process = None
        (self.directory / STATE_FILE).unlink(missing_ok=True)
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _install(self, deadline: float) -> None:
        crds = manifests(CRD_FOLDER)
        for crd in crds:
            self._create(_CRD_PATH, crd)
        self.cluster.create_namespace(NAMESPACE)
        self._create(
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
        )
        subject = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
        for role in (doc for path in CONTROLLER_RBAC for doc in manifests(path)):
            cluster_wide = role["kind"] == "ClusterRole"
            where = _RBAC if cluster_wide else f"{_RBAC}/namespaces/{NAMESPACE}"
            plural = "clusterroles" if cluster_wide else "roles"
            self._create(f"{where}/{plural}", role)
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": f"{role['kind']}Binding",
                "metadata": {"name": role["metadata"]["name"]},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": role["kind"],
                    "name": role["metadata"]["name"],
                },
                "subjects": [subject],
            }
            self._create(f"{where}/{plural[:-1]}bindings", binding)
        executor = {key: value for key, value in EXECUTOR.items() if key != "image"}
        config = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP},
            "data": {
                "executor": yaml.safe_dump({"image": ARGOEXEC_IMAGE, **executor}),
                "metricsConfig": yaml.safe_dump({"enabled": False}),
                "telemetryConfig": yaml.safe_dump({"enabled": False}),
            },
        }
        self._create(f"/api/v1/namespaces/{NAMESPACE}/configmaps", config)
        self._wait_established([crd["metadata"]["name"] for crd in crds], deadline)

    def _create(self, path: str, body: dict[str, Any]) -> None:
        status, answer = self.cluster.request("POST", path, body)
        if status not in (200, 201, 409):  # 409: there already (a restart on the same server)
            name = body.get("metadata", {}).get("name")
            raise HarnessError(f"creating {body.get('kind')} {name}: HTTP {status}: {answer}")

    def _wait_established(self, names: list[str], deadline: float) -> None:
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                _, crd = self.cluster.request("GET", f"{_CRD_PATH}/{name}")
                conditions = ((crd or {}).get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            if pending:
                time.sleep(0.1)
        if pending:
            raise HarnessError(f"Argo's CRDs not Established in time: {', '.join(sorted(pending))}")

    def _write_kubeconfig(self) -> Path:
        """The controller's credential: a client certificate in the name of `kubeflow:argo`."""
        pki = self.cluster.directory / "pki"
        certificate, key = _sign(
            pki,
            f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}",
            organization="system:serviceaccounts",
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        path = self.directory / "workflow-controller.kubeconfig"
        path.write_text(
            _kubeconfig(self.cluster.url, (pki / "ca.crt").read_bytes(), certificate, key, ACCOUNT)
        )
        path.chmod(0o600)
        return path

    def _wait_started(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise HarnessError(
                    f"workflow-controller exited with status {self._process.returncode}; "
                    f"its log ends:\n{self.log(40)}"
                )
            if _STARTED in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise HarnessError(
            f"workflow-controller did not start in time; its log ends:\n{self.log()}"
        )

    # --- what tests use ---------------------------------------------------------------------

    def grant_executor(self, namespace: str, service_account: str) -> None:
        """Argo's minimal executor Role for `service_account` of `namespace` (a namespace
        without the tenant's bundle, which grants it to the pipeline runner)."""
        (role,) = manifests(EXECUTOR_ROLE)
        self._create(f"{_RBAC}/namespaces/{namespace}/roles", role)
        self._create(
            f"{_RBAC}/namespaces/{namespace}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{role['metadata']['name']}-{service_account}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": role["metadata"]["name"],
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
                ],
            },
        )

    def submit(self, workflow: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create `workflow` in `namespace` as the admin (as KFP's API server does for a run)."""
        status, answer = self.cluster.request(
            "POST", _WORKFLOWS.format(namespace=namespace), workflow
        )
        if status != 201:
            raise HarnessError(f"creating the Workflow: HTTP {status}: {answer}")
        return dict(answer)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        status, answer = self.cluster.request(
            "GET", f"{_WORKFLOWS.format(namespace=namespace)}/{name}"
        )
        if status != 200:
            raise HarnessError(f"reading Workflow {namespace}/{name}: HTTP {status}: {answer}")
        return dict(answer)

    def wait(self, namespace: str, name: str, timeout_s: float = 300.0) -> dict[str, Any]:
        """The Workflow once its phase is Succeeded, Failed or Error (HarnessError on timeout,
        naming its nodes' phases and messages and the end of the controller's log)."""
        deadline = time.monotonic() + timeout_s
        while True:
            workflow = self.get(namespace, name)
            if (workflow.get("status") or {}).get("phase") in DONE:
                return workflow
            if self._process is not None and self._process.poll() is not None:
                raise HarnessError(f"workflow-controller exited; its log ends:\n{self.log(40)}")
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"Workflow {namespace}/{name} did not finish in {timeout_s:.0f} s: "
                    f"{json.dumps(node_states(workflow), indent=1)}\n"
                    f"workflow-controller's log ends:\n{self.log(30)}"
                )
            time.sleep(0.5)


def node_states(workflow: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each node of a Workflow's status by display name: type, phase, message, pod name."""
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    return {
        node.get("displayName", key): {
            "type": node.get("type", ""),
            "phase": node.get("phase", ""),
            "message": node.get("message", ""),
            "templateName": node.get("templateName", ""),
            "id": key,
        }
        for key, node in nodes.items()
    }


# --- `make cluster-up` / `cluster-down` (tests/harness/node.py) -----------------------------


def up(cluster: ControlPlane, node: Node, directory: Path) -> WorkflowController:
    """The controller for `up`'s control plane and node, left running (its pid in
    `argo/argo.json`): argoexec and the kfp-launcher stand-in pushed to the node's registry, which
    its containerd mirrors `quay.io` and `ghcr.io` from (tests/harness/kfp_images.py), and the
    `kubernetes` Service routed to the API server for Argo's executor in the pods
    (tests/harness/kubernetes_service.py; `down` removes its table)."""
    push_kfp_images(node.registry)
    mirror_kfp_registries(node, node.registry)
    route = ServiceRoute(node.network, cluster).__enter__()  # left in place until `down`
    controller = WorkflowController(cluster, directory / "argo")
    try:
        controller.start(detach=True, route=route.table)
    except BaseException:
        route.__exit__(None, None, None)
        raise
    return controller


def down(directory: Path) -> list[str]:
    """Stop the controller `up` left running in `directory`, remove its Service route."""
    state_path = directory / "argo" / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    stopped = []
    if _ours(int(state["pid"]), directory / "argo"):
        _terminate(int(state["pid"]))
        stopped.append("workflow-controller")
    if state.get("route"):
        subprocess.run(["nft", "delete", "table", "ip", state["route"]], capture_output=True)
    state_path.unlink()
    return stopped
