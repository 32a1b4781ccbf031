"""SPIFFE identity on the test node: SPIRE with the k8s attestors, the SPIFFE CSI driver, and
spire-controller-manager (started by `tests/harness/node.py`'s `Node`, see docs/testing.md).

- **spire-server** (`tests/harness/build.sh spire`) on 127.0.0.1 of the host, trust domain
  `acme.example`, with the `k8s_psat` node attestor: it checks an agent's projected service-account
  token with a TokenReview against the node's API server (audience `spire-server`, service account
  `secureml-system:spire-agent` only), reads the pod the token is bound to and that pod's node, and
  names the agent `spiffe://acme.example/spire/agent/k8s_psat/secureml-test/<node uid>`;
- **spire-agent** as a pod on the node, as a DaemonSet runs it (hostPID, hostNetwork, image
  `agents` from the node's registry), attesting with that token (`k8s_psat`) and attesting workloads
  with the `k8s` workload attestor against this kubelet's secure port: it asks
  `https://<node address>:10250/pods` with its own service-account token (the kubelet's webhook
  authentication and authorization: RBAC `nodes/proxy` and `nodes/pods` get) and checks the
  kubelet's serving certificate against the cluster CA the pod was given. Its Workload API socket
  is in a host folder (`<node>/spire/sockets`);
- **spiffe-csi-driver** v0.2.6 (`build.sh spiffe-csi`) on the host, serving the CSI socket in the
  kubelet's `plugins/csi.spiffe.io/`; it bind-mounts the agent's socket folder, read-only, into
  every pod that has an inline `csi.spiffe.io` volume. The kubelet learns of it through our
  **registrar** (the kubelet's plugin registration API in `plugins_registry/`): the module proxy
  does not serve node-driver-registrar. A `CSIDriver` object declares it ephemeral-only, with no
  attach;
- **spire-controller-manager** v0.6.4 on the host, turning the ClusterSPIFFEIDs in the cluster (what
  `secureml profile render` writes) into entries whose parent is the node's agent and whose
  selector is the pod's UID.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .controlplane import CRDS, HarnessError
from .spire import server_config

if TYPE_CHECKING:
    from .node import Node

TRUST_DOMAIN = "acme.example"
CLUSTER_NAME = "secureml-test"
SYSTEM_NAMESPACE = "secureml-system"
CSI_DRIVER = "csi.spiffe.io"
AGENT_SOCKET = "spire-agent.sock"
CLUSTERSPIFFEID_CRD = "spire.spiffe.io_clusterspiffeids.yaml"


def apply(node: Node, path: str, body: dict[str, Any]) -> None:
    """Create `body` at collection `path` as admin; an object that exists is replaced."""
    status, answer = node.cluster.request("POST", path, body)
    if status == 409:
        name = body["metadata"]["name"]
        _, current = node.cluster.request("GET", f"{path}/{name}")
        body = {
            **body,
            "metadata": {
                **body["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        status, answer = node.cluster.request("PUT", f"{path}/{name}", body)
    if status not in (200, 201):
        raise HarnessError(
            f"creating {body.get('kind')} {body['metadata']['name']}: HTTP {status}: {answer}"
        )


def system_namespace(node: Node) -> None:
    """`secureml-system`, where the node's agents run as pods (PodSecurity privileged)."""
    apply(
        node,
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": SYSTEM_NAMESPACE,
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
            },
        },
    )


def service_account(node: Node, name: str, rules: list[dict[str, Any]]) -> None:
    """A service account in `secureml-system` bound to a ClusterRole of `rules`."""
    apply(
        node,
        f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role = f"secureml-node:{name}"
    apply(
        node,
        f"{rbac}/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        },
    )
    apply(
        node,
        f"{rbac}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SYSTEM_NAMESPACE}],
        },
    )


def wait_for_pod(node: Node, namespace: str, name: str, deadline: float) -> dict[str, Any]:
    """The pod once it is Running with every container ready."""
    current: Any = None
    while time.monotonic() < deadline:
        status, current = node.cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if status == 200:
            statuses = current["status"].get("containerStatuses") or []
            if (
                current["status"].get("phase") == "Running"
                and statuses
                and all(s.get("ready") for s in statuses)
            ):
                return dict(current)
            if current["status"].get("phase") in ("Failed", "Succeeded"):
                break
        time.sleep(0.1)
    raise HarnessError(
        f"pod {namespace}/{name} is not running: {json.dumps((current or {}).get('status'))}"
    )


def delete_pod(node: Node, namespace: str, name: str, timeout_s: float = 30.0) -> None:
    """Delete the pod at once and wait until the API server has forgotten it (the kubelet
    has stopped its containers)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    node.cluster.request(
        "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _ = node.cluster.request("GET", path)
        if status == 404:
            return
        time.sleep(0.1)
    raise HarnessError(f"pod {namespace}/{name} was not deleted in {timeout_s} s")


class NodeIdentity:
    """SPIRE, the CSI driver and spire-controller-manager for `node` (see the module docstring).

    `spire_bin` holds spire-server and spire-agent, `csi_bin` spiffe-csi-driver and registrar,
    `controller_manager` is the spire-controller-manager binary. The host programs run through
    `node`'s own process table (`node.log("spire-server")` reads a log)."""

    def __init__(self, node: Node, spire_bin: Path, csi_bin: Path, controller_manager: Path):
        self.node = node
        self.spire_bin = spire_bin
        self.csi_bin = csi_bin
        self.controller_manager = controller_manager
        self.folder = node.directory / "spire"
        self.port = 0
        self.bundle = ""

    # --- what callers use -------------------------------------------------------------------

    @property
    def server_socket(self) -> Path:
        return self.folder / "server" / "api.sock"

    @property
    def sockets(self) -> Path:
        """The host folder of the agent's Workload API socket (what the CSI driver mounts)."""
        return self.folder / "sockets"

    @property
    def agent_socket(self) -> Path:
        return self.sockets / AGENT_SOCKET

    @property
    def kubelet_root(self) -> Path:
        return self.node.directory / "kubelet"

    def agent_id(self) -> str:
        """The SPIFFE ID `k8s_psat` gives the node's agent (and every pod entry's parent)."""
        status, node = self.node.cluster.request("GET", f"/api/v1/nodes/{self.node.name}")
        if status != 200:
            raise HarnessError(f"reading node {self.node.name}: HTTP {status}: {node}")
        uid = node["metadata"]["uid"]
        return f"spiffe://{TRUST_DOMAIN}/spire/agent/k8s_psat/{CLUSTER_NAME}/{uid}"

    def server(self, *arguments: str) -> str:
        """One `spire-server` CLI command against this server; its stdout."""
        done = subprocess.run(
            [
                str(self.spire_bin / "spire-server"),
                *arguments,
                "-socketPath",
                str(self.server_socket),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(
                f"spire-server {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}"
            )
        return done.stdout

    def entries(self) -> list[dict[str, Any]]:
        return list(
            json.loads(self.server("entry", "show", "-output", "json")).get("entries") or []
        )

    def agent_log(self, lines: int = 60) -> str:
        """The agent pod's log, read from the kubelet's pod-log folder."""
        found = sorted(
            self.node.pod_logs.glob(f"{SYSTEM_NAMESPACE}_spire-agent_*/spire-agent/*.log")
        )
        if not found:
            return "(no agent log)"
        return "\n".join(found[-1].read_text(errors="replace").splitlines()[-lines:])

    def stop_agent(self) -> None:
        """Delete the agent's pod (its Workload API socket goes with it)."""
        delete_pod(self.node, SYSTEM_NAMESPACE, "spire-agent")
        with contextlib.suppress(FileNotFoundError):
            self.agent_socket.unlink()  # SIGKILLed agents leave it behind

    def start_agent(self, timeout_s: float = 60.0) -> None:
        """Run the agent's pod and wait until its Workload API answers."""
        deadline = time.monotonic() + timeout_s
        self.node.cluster.request(
            "POST", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods", self._agent_pod()
        )
        wait_for_pod(self.node, SYSTEM_NAMESPACE, "spire-agent", deadline)
        self._wait_healthy("spire-agent", self.agent_socket, deadline)

    @contextlib.contextmanager
    def agent_stopped(self) -> Iterator[None]:
        """The agent is down inside the block and back (healthy) after it."""
        self.stop_agent()
        try:
            yield
        finally:
            self.start_agent()

    # --- start ------------------------------------------------------------------------------

    def start(self, detach: bool, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        for folder in (self.folder / "server", self.folder / "controller-manager", self.sockets):
            folder.mkdir(parents=True, exist_ok=True)
        self._install_crd(deadline)
        system_namespace(self.node)
        service_account(
            self.node,
            "spire-agent",
            [{"apiGroups": [""], "resources": ["nodes/proxy", "nodes/pods"], "verbs": ["get"]}],
        )
        apply(
            self.node,
            "/apis/storage.k8s.io/v1/csidrivers",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": CSI_DRIVER},
                "spec": {
                    "attachRequired": False,
                    "podInfoOnMount": True,
                    "fsGroupPolicy": "None",
                    "volumeLifecycleModes": ["Ephemeral"],
                },
            },
        )
        self._start_server(detach, deadline)
        self._start_csi_driver(detach, deadline)
        self._start_controller_manager(detach)
        self.start_agent(max(deadline - time.monotonic(), 1.0))

    def _install_crd(self, deadline: float) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        crd = yaml.safe_load((CRDS / CLUSTERSPIFFEID_CRD).read_text())
        status, answer = self.node.cluster.request("POST", path, crd)
        if status not in (201, 409):
            raise HarnessError(f"installing the ClusterSPIFFEID CRD: HTTP {status}: {answer}")
        while time.monotonic() < deadline:
            _, current = self.node.cluster.request("GET", f"{path}/{crd['metadata']['name']}")
            conditions = ((current or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.1)
        raise HarnessError("the ClusterSPIFFEID CRD was not Established in time")

    def _start_server(self, detach: bool, deadline: float) -> None:
        from .node import _free_port

        self.port = _free_port()
        data = self.folder / "server"
        psat = f"""
            clusters = {{
                "{CLUSTER_NAME}" = {{
                    service_account_allow_list = ["{SYSTEM_NAMESPACE}:spire-agent"]
                    kube_config_file = "{self.node.cluster.kubeconfig}"
                }}
            }}
        """
        config = server_config(self.port, self.server_socket, TRUST_DOMAIN, data, "k8s_psat", psat)
        (data / "server.conf").write_text(config)
        self.node._spawn(
            "spire-server",
            [str(self.spire_bin / "spire-server"), "run", "-config", str(data / "server.conf")],
            detach,
        )
        self._wait_healthy("spire-server", self.server_socket, deadline)
        self.bundle = self.server("bundle", "show")

    def _start_csi_driver(self, detach: bool, deadline: float) -> None:
        plugin = self.kubelet_root / "plugins" / CSI_DRIVER
        registry = self.kubelet_root / "plugins_registry"
        plugin.mkdir(parents=True, exist_ok=True)
        registry.mkdir(parents=True, exist_ok=True)
        csi_socket = plugin / "csi.sock"
        self.node._spawn(
            "spiffe-csi-driver",
            [
                str(self.csi_bin / "spiffe-csi-driver"),
                f"-node-id={self.node.name}",
                f"-csi-socket-path={csi_socket}",
                f"-workload-api-socket-dir={self.sockets}",
            ],
            detach,
        )
        while not csi_socket.is_socket():
            self.node._check_alive()
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"spiffe-csi-driver made no socket:\n{self.node.log(20, 'spiffe-csi-driver')}"
                )
            time.sleep(0.05)
        self.node._spawn(
            "registrar",
            [
                str(self.csi_bin / "registrar"),
                f"-registration-socket={registry / f'{CSI_DRIVER}-reg.sock'}",
                f"-plugin-name={CSI_DRIVER}",
                f"-csi-endpoint={csi_socket}",
            ],
            detach,
        )
        # The kubelet's plugin watcher calls GetInfo, then the driver's NodeGetInfo, and records
        # the driver in the node's CSINode object.
        while time.monotonic() < deadline:
            self.node._check_alive()
            status, csinode = self.node.cluster.request(
                "GET", f"/apis/storage.k8s.io/v1/csinodes/{self.node.name}"
            )
            if status == 200 and any(
                d["name"] == CSI_DRIVER for d in csinode["spec"].get("drivers") or []
            ):
                return
            time.sleep(0.1)
        raise HarnessError(
            f"the kubelet did not register {CSI_DRIVER}; the registrar's log ends:\n"
            f"{self.node.log(20, 'registrar')}\nthe kubelet's:\n{self.node.log(20)}"
        )

    def _start_controller_manager(self, detach: bool) -> None:
        folder = self.folder / "controller-manager"
        config = {
            "apiVersion": "spire.spiffe.io/v1alpha1",
            "kind": "ControllerManagerConfig",
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "validatingWebhookConfigurationName": "spire-controller-manager-webhook",
            "clusterName": CLUSTER_NAME,
            "trustDomain": TRUST_DOMAIN,
            "spireServerSocketPath": str(self.server_socket),
            "ignoreNamespaces": ["kube-system", "kube-public", SYSTEM_NAMESPACE],
            "entryIDPrefix": "secureml-node",
            "reconcile": {
                "clusterSPIFFEIDs": True,
                "clusterFederatedTrustDomains": False,
                "clusterStaticEntries": False,
            },
        }
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        self.node._spawn(
            "spire-controller-manager",
            [str(self.controller_manager), "-config", str(folder / "config.json")],
            detach,
            env={"KUBECONFIG": str(self.node.cluster.kubeconfig), "ENABLE_WEBHOOKS": "false"},
        )

    def _agent_config(self) -> str:
        return f"""
agent {{
    data_dir = "/run/spire/data"
    log_level = "INFO"
    server_address = "127.0.0.1"
    server_port = "{self.port}"
    socket_path = "/run/spire/sockets/{AGENT_SOCKET}"
    trust_bundle_path = "/etc/spire/bundle.pem"
    trust_domain = "{TRUST_DOMAIN}"
    experimental {{
        sync_interval = "500ms"
    }}
}}
plugins {{
    KeyManager "memory" {{
        plugin_data {{}}
    }}
    NodeAttestor "k8s_psat" {{
        plugin_data {{
            cluster = "{CLUSTER_NAME}"
            token_path = "/var/run/secrets/tokens/spire-agent"
        }}
    }}
    WorkloadAttestor "k8s" {{
        plugin_data {{
            # The kubelet's secure port on the node's address; its serving certificate is checked
            # against the cluster CA of the pod's service-account volume, and the agent's own
            # service-account token authenticates it (webhook authn/authz).
            node_name = "{self.node.network.address}"
            kubelet_secure_port = 10250
        }}
    }}
}}
"""

    def _agent_pod(self) -> dict[str, Any]:
        apply(
            self.node,
            f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "spire-agent"},
                "data": {"agent.conf": self._agent_config(), "bundle.pem": self.bundle},
            },
        )
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "spire-agent", "labels": {"app": "spire-agent"}},
            "spec": {
                "nodeName": self.node.name,  # as a DaemonSet's pod: bound to its node
                "serviceAccountName": "spire-agent",
                "hostPID": True,  # the workload attestor reads callers' /proc/<pid>/cgroup
                "hostNetwork": True,
                "tolerations": [{"operator": "Exists"}],
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {
                        "name": "spire-agent",
                        "image": self.node.image("agents"),
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/spire-agent", "run", "-config", "/etc/spire/agent.conf"],
                        "securityContext": {"runAsUser": 0, "readOnlyRootFilesystem": True},
                        "volumeMounts": [
                            {"name": "config", "mountPath": "/etc/spire", "readOnly": True},
                            {"name": "sockets", "mountPath": "/run/spire/sockets"},
                            {"name": "token", "mountPath": "/var/run/secrets/tokens"},
                            {"name": "data", "mountPath": "/run/spire/data"},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "config", "configMap": {"name": "spire-agent"}},
                    {
                        "name": "sockets",
                        "hostPath": {"path": str(self.sockets), "type": "DirectoryOrCreate"},
                    },
                    {
                        "name": "token",
                        "projected": {
                            "sources": [
                                {
                                    "serviceAccountToken": {
                                        "audience": "spire-server",
                                        "expirationSeconds": 7200,
                                        "path": "spire-agent",
                                    }
                                }
                            ]
                        },
                    },
                    {"name": "data", "emptyDir": {}},
                ],
            },
        }

    def _wait_healthy(self, binary: str, socket_path: Path, deadline: float) -> None:
        done: subprocess.CompletedProcess[str] | None = None
        while time.monotonic() < deadline:
            self.node._check_alive()
            done = subprocess.run(
                [
                    str(self.spire_bin / binary),
                    "healthcheck",
                    "-socketPath",
                    str(socket_path),
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if done.returncode == 0:
                return
            time.sleep(0.1)
        log = self.agent_log() if binary == "spire-agent" else self.node.log(40, binary)
        detail = (done.stdout + done.stderr) if done else ""
        raise HarnessError(f"{binary} not healthy in time: {detail}\nits log ends:\n{log}")


def agent_image_files(spire_bin: Path, network_policies_bin: Path) -> dict[str, Path]:
    """The `agents` image's files (path in the image -> host file): spire-agent (linked against
    glibc: its libraries and loader come along, as `ldd` names them) and kube-network-policies
    (static)."""
    agent = spire_bin / "spire-agent"
    files = {
        "spire-agent": agent,
        "kube-network-policies": network_policies_bin / "kube-network-policies",
    }
    listed = subprocess.run(["ldd", str(agent)], capture_output=True, text=True, check=False)
    if listed.returncode == 0:  # "not a dynamic executable": exit 1, nothing to add
        for line in listed.stdout.splitlines():
            for word in line.split():
                if word.startswith("/"):
                    files[word.lstrip("/")] = Path(word).resolve()
    if shutil.which("ldd") is None:
        raise HarnessError("ldd (Debian package libc-bin) is needed to build the agents image")
    return files
