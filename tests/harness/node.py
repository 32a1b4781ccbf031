"""A real Kubernetes node for the tests: containerd + runc + CNI, a kubelet and kube-scheduler.

The kubelet and kube-scheduler come from `tests/harness/build.sh node` (built once per machine from
the Go module proxy, the control plane's Kubernetes version: tests/harness/node/go.mod), or from the
folder named by SECUREML_NODE_BIN; containerd, runc and the CNI plugins are Debian's packages
(`make deps`). Needs root (network namespaces, cgroups, mounts) and cgroup v1 or v2 with the
cgroupfs driver; tested on cgroup v1 (this machine), where the kubelet needs `failCgroupV1: false`.

`NodeNetwork` (a context manager) takes a free slot N on this machine (a file lock: several test
processes can each run a node) and puts the slot's address 10.233.N.1 on `lo`: the API server
binds it (`ControlPlane(address=...)`) and the kubelet serves on it, so pods reach both through
their default route, without kube-proxy. Pods get 10.234.N.0/24 on the bridge `smlnodeN` (CNI
bridge + host-local, loopback, portmap; no masquerade) and an nftables table of the slot drops
whatever the bridge would forward elsewhere: pods reach this machine only.

`Node(cluster, network)` then starts, in its own folder:

- docker-registry (Debian's, plain HTTP on 127.0.0.1) holding the node's three images, built with
  buildah (`--isolation chroot`, FROM scratch) from tests/harness/node/images: `pause` (the
  sandbox image, our static pause.c), `busybox` (Debian's busybox-static, and our static probes:
  `apiprobe`, an in-cluster client, busybox's own TLS cannot talk to the API server; `svidprobe`,
  a Workload API client; `netprobe`, TCP echo) and `agents` (spire-agent, kube-network-policies);
  containerd pulls them by digest, as a production node pulls from its registry (`image(name)`
  gives the pinned reference);
- containerd with a config of ours: private root, state and socket, overlayfs, runc with the
  cgroupfs driver, `restrict_oom_score_adj = true` (this VM withholds CAP_SYS_RESOURCE even from
  root, and runc fails every sandbox otherwise), the CNI network above, the registry as a plain
  HTTP host (`certs.d`; `allow_registry(host)` adds another);
- the kubelet, registered as `system:node:<name>` with a client certificate signed by the cluster
  CA (the Node authorizer and NodeRestriction judge it), serving on the slot address with a
  certificate of the same CA (the API server checks it for logs and exec), webhook authn/authz,
  its cgroups under `/secureml-node-N` in every hierarchy, the node labelled and tainted like a
  platform's dedicated GPU pool (LABELS, TAINTS);
- kube-scheduler as `system:kube-scheduler` (the RBAC role Kubernetes bootstraps for it);
- unless `network_policies=False`: kube-network-policies as a pod of the node, over nftables
  (tests/harness/node_netpol.py; `node.network_policies`), and the slot's outside namespace
  (10.235.N.2 and 198.18.N.2, echo servers on 443 and 8080);
- unless `identity=False`: spire-server (k8s_psat), spire-agent as a pod of the node (k8s
  workload attestor against this kubelet), the SPIFFE CSI driver `csi.spiffe.io` registered with
  the kubelet, spire-controller-manager (tests/harness/node_identity.py; `node.identity`).

`start()` returns once the node is Ready and untainted of `not-ready` (the control plane's
node-lifecycle-controller), `kube-root-ca.crt` is published (root-ca-cert-publisher), and the
agents above answer.

    python -m tests.harness.node up [--dir .cluster]    # control plane + node, left running
    python -m tests.harness.node down [--dir .cluster]

`up` also starts Kubeflow Trainer's and JobSet's controllers against the control plane
(tests/harness/trainer_controllers.py, in `<dir>/trainer`); `down` stops them first.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import fcntl
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .built import built
from .controlplane import (
    CRDS,
    ControlPlane,
    HarnessError,
    _die_with_parent,
    _ours,
    _terminate,
)
from .controlplane import (
    STATE_FILE as CONTROLPLANE_STATE,
)
from .controlplane import (
    down as controlplane_down,
)
from .node_identity import NodeIdentity, agent_image_files
from .node_netpol import NodeNetworkPolicies
from .service import Service
from .trainer_controllers import TrainerControllers
from .trainer_controllers import down as trainer_down

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
IMAGES = HERE / "node" / "images"
PROGRAMS = (  # stopped in this order (the node's agent pods are deleted first)
    "spire-controller-manager",
    "registrar",
    "spiffe-csi-driver",
    "spire-server",
    "outside-echo",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "docker-registry",
)
BUILT = ("kubelet", "kube-scheduler", "apiprobe")  # by build.sh; the others are Debian's
MODULES = {  # the other modules build.sh builds for the node, and what each must hold
    "spire": ("spire-server", "spire-agent"),
    "spire-controller-manager": ("spire-controller-manager",),
    "spiffe-csi": ("spiffe-csi-driver", "registrar", "svidprobe"),
    "network-policies": ("kube-network-policies", "netprobe"),
}
SYSTEM = {  # program -> Debian package (`make deps` installs them)
    "containerd": "containerd",
    "runc": "runc",
    "docker-registry": "docker-registry",
    "buildah": "buildah",
    "nft": "nftables",
    "ip": "iproute2",
    "cc": "gcc",
    "ldd": "libc-bin",
}
CNI_BIN = Path("/usr/lib/cni")  # containernetworking-plugins
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
BUSYBOX = Path("/bin/busybox")  # busybox-static
STATE_FILE = "node.json"
SLOTS = 32
# Like a platform's dedicated GPU pool (profiles/team-a.yaml's wholeGpu node selector and
# toleration); a pod runs here only with `TOLERATIONS` (and may select `LABELS`).
LABELS = {"secureml.dev/pool": "dedicated", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
TAINTS = ({"key": "secureml.dev/dedicated", "value": "team-a", "effect": "NoSchedule"},)
TOLERATIONS = [{"operator": "Equal", **taint} for taint in TAINTS]


def binaries() -> Path:
    """The folder holding BUILT: SECUREML_NODE_BIN, else build.sh's cache (built if absent)."""
    return built("node", BUILT, override=os.environ.get("SECUREML_NODE_BIN"))


def module_binaries(module: str) -> Path:
    """The folder of one of MODULES (built by build.sh if absent)."""
    return built(module, MODULES[module])


def missing_requirements() -> list[str]:
    """What this machine lacks to run a node (empty when it can): root, programs, CNI plugins,
    and the real CRDs (a checkout without ../shared/fixtures)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the node makes network namespaces, cgroups and mounts)")
    for program, package in SYSTEM.items():
        if shutil.which(program) is None:
            missing.append(f"{program} (Debian package {package})")
    for plugin in CNI_PLUGINS:
        if not os.access(CNI_BIN / plugin, os.X_OK):
            missing.append(f"{CNI_BIN / plugin} (Debian package containernetworking-plugins)")
    if not os.access(BUSYBOX, os.X_OK):
        missing.append(f"{BUSYBOX} (Debian package busybox-static)")
    if missing:
        missing.append("`make deps` installs them on Debian")
    if not CRDS.is_dir():  # the node's SPIRE needs the ClusterSPIFFEID CRD, as the bundle does
        missing.append(f"the real CRDs of ../shared/fixtures/crds ({CRDS} is absent)")
    return missing


# --- the network of one slot -----------------------------------------------------------------


def _run(command: list[str], what: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise HarnessError(
            f"{what} failed: {' '.join(command)} (exit {done.returncode}):\n"
            f"{(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return done


def _address_on_lo(address: str) -> bool:
    shown = _run(["ip", "-o", "-4", "addr", "show", "dev", "lo"], "listing lo's addresses")
    return f" {address}/32 " in shown.stdout


class NodeNetwork:
    """Slot N of this machine: 10.233.N.1 on `lo` (API server, kubelet), pods on 10.234.N.0/24
    behind the bridge `smlnodeN`, and an nftables table that keeps their traffic on this machine.

    `slot` None takes the first free one; `keep` leaves the address and table in place at exit
    (`up`: `release(slot)` removes them)."""

    def __init__(self, slot: int | None = None, *, keep: bool = False) -> None:
        self._wanted = slot
        self.keep = keep
        self.slot = -1
        self._lock: IO[str] | None = None

    @property
    def address(self) -> str:
        return f"10.233.{self.slot}.1"

    @property
    def subnet(self) -> str:
        return f"10.234.{self.slot}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.234.{self.slot}.1"

    @property
    def bridge(self) -> str:
        return f"smlnode{self.slot}"

    @property
    def table(self) -> str:
        return f"secureml_node_{self.slot}"

    @property
    def outside_namespace(self) -> str:
        """A network namespace standing for the world outside the node: a NetworkPolicy's
        ipBlock allows its addresses or not (tests/harness/node_netpol.py)."""
        return f"secureml-outside-{self.slot}"

    @property
    def outside_veth(self) -> str:
        return f"smlout{self.slot}"

    @property
    def outside_addresses(self) -> tuple[str, str]:
        """One address in 10.0.0.0/8 (team-a's egress allowlist) and one outside it (198.18.0.0/15,
        the benchmarking range: routed nowhere but here)."""
        return (f"10.235.{self.slot}.2", f"198.18.{self.slot}.2")

    def __enter__(self) -> NodeNetwork:
        locks = Path("/run/secureml-node")
        locks.mkdir(parents=True, exist_ok=True)
        for slot in [self._wanted] if self._wanted is not None else range(SLOTS):
            lock = (locks / f"slot-{slot}.lock").open("w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            self.slot = slot
            if _address_on_lo(self.address) and self._wanted is None:  # a node left by `up`
                lock.close()
                continue
            self._lock = lock
            break
        if self._lock is None:
            raise HarnessError(
                f"no free node slot on this machine (of {SLOTS}; /run/secureml-node)"
            )
        try:
            self._set_up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _set_up(self) -> None:
        release(self.slot)  # whatever a crashed run of this slot left
        _run(["ip", "addr", "add", f"{self.address}/32", "dev", "lo"], "adding the node address")
        self._set_up_outside()
        ruleset = f"""
table inet {self.table} {{
    chain forward {{
        type filter hook forward priority 0; policy accept;
        iifname "{self.bridge}" oifname "{self.outside_veth}" accept
        iifname "{self.outside_veth}" oifname "{self.bridge}" accept
        iifname "{self.bridge}" oifname != "{self.bridge}" drop
        oifname "{self.bridge}" iifname != "{self.bridge}" drop
    }}
}}
"""
        done = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
        if done.returncode != 0:
            raise HarnessError(f"nft refused the node's forward rules: {done.stderr.strip()}")

    def _set_up_outside(self) -> None:
        """The slot's outside namespace: veth `smloutN` (10.235.N.1 here, the two outside
        addresses there, routed through it; its default route back through here). Pods reach it through the node's
        forwarding, where kube-network-policies' postrouting hook sees them."""
        namespace, veth = self.outside_namespace, self.outside_veth
        inside = f"smlout{self.slot}x"
        for command in (
            ["ip", "netns", "add", namespace],
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", inside],
            ["ip", "link", "set", inside, "netns", namespace],
            ["ip", "addr", "add", f"10.235.{self.slot}.1/24", "dev", veth],
            ["ip", "link", "set", veth, "up"],
            ["ip", "-n", namespace, "link", "set", "lo", "up"],
            ["ip", "-n", namespace, "link", "set", inside, "name", "eth0"],
            [
                "ip",
                "-n",
                namespace,
                "addr",
                "add",
                f"{self.outside_addresses[0]}/24",
                "dev",
                "eth0",
            ],
            [
                "ip",
                "-n",
                namespace,
                "addr",
                "add",
                f"{self.outside_addresses[1]}/32",
                "dev",
                "eth0",
            ],
            ["ip", "-n", namespace, "link", "set", "eth0", "up"],
            ["ip", "-n", namespace, "route", "add", "default", "via", f"10.235.{self.slot}.1"],
            [
                "ip",
                "route",
                "add",
                f"{self.outside_addresses[1]}/32",
                "via",
                self.outside_addresses[0],
            ],
        ):
            _run(command, "making the node's outside namespace")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.slot >= 0 and not self.keep:
            release(self.slot)
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def release(slot: int) -> None:
    """Remove slot `slot`'s address, bridge and nftables table (each if present)."""
    network = NodeNetwork(slot)
    network.slot = slot
    if _address_on_lo(network.address):
        _run(["ip", "addr", "del", f"{network.address}/32", "dev", "lo"], "removing the address")
    _run(["ip", "link", "del", network.bridge], "removing the bridge", check=False)
    _run(["nft", "delete", "table", "inet", network.table], "removing the table", check=False)
    _run(["ip", "link", "del", network.outside_veth], "removing the outside veth", check=False)
    _run(["ip", "netns", "del", network.outside_namespace], "removing the netns", check=False)
    _run(  # kube-network-policies leaves its table behind when it is killed
        ["nft", "delete", "table", "inet", f"secureml_netpol_{slot}"],
        "removing the NetworkPolicy table",
        check=False,
    )


# --- certificates ----------------------------------------------------------------------------


def _sign(
    pki: Path,
    common_name: str,
    *,
    organization: str | None = None,
    usage: x509.ObjectIdentifier,
    ips: tuple[str, ...] = (),
) -> tuple[bytes, bytes]:
    """A certificate and key signed by the control plane's CA (`pki/ca.crt`, `pki/ca.key`)."""
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if ips:
        names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), pem_key


def _kubeconfig(server: str, ca: bytes, certificate: bytes, key: bytes, user: str) -> str:
    def data(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "secureml-test",
                "cluster": {"server": server, "certificate-authority-data": data(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(certificate),
                    "client-key-data": data(key),
                },
            }
        ],
        "contexts": [
            {"name": "secureml-test", "context": {"cluster": "secureml-test", "user": user}}
        ],
        "current-context": "secureml-test",
    }
    return yaml.safe_dump(config, sort_keys=False)


# --- the node --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Node(Service):
    """containerd, a kubelet and kube-scheduler for `cluster`, on `network`'s slot.

    `directory` holds every program's config, state and log (`<program>.log`), the kubelet's pod
    logs (`pod-logs/`) and the images' build contexts; a temporary folder under /var/tmp is made and
    removed when none is given (not /dev/shm: the kubelet's node filesystem must be a disk).
    """

    def __init__(
        self,
        cluster: ControlPlane,
        network: NodeNetwork,
        directory: Path | None = None,
        *,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        taints: tuple[dict[str, str], ...] = TAINTS,
        identity: bool = True,
        network_policies: bool = True,
        cluster_dns: str = "",
    ) -> None:
        self.cluster = cluster
        self.network = network
        self.name = name or f"secureml-node-{network.slot}"
        self.labels = LABELS if labels is None else labels
        self.taints = taints
        self._owns_directory = directory is None
        self.directory = (
            Path(directory)
            if directory
            else Path(tempfile.mkdtemp(prefix="secureml-node-", dir="/var/tmp"))
        )
        self.registry = ""
        self.images: dict[str, str] = {}
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started_in_s = 0.0
        self.timings: dict[str, float] = {}
        self._want_identity = identity
        self._want_network_policies = network_policies
        self.cluster_dns = cluster_dns  # the kubelet's clusterDNS (tests/harness/cluster_dns.py)
        self.identity: NodeIdentity | None = None
        self.network_policies: NodeNetworkPolicies | None = None

    # --- what callers use -------------------------------------------------------------------

    @property
    def cgroup_root(self) -> str:
        return f"/secureml-node-{self.network.slot}"

    @property
    def containerd_socket(self) -> Path:
        return self.directory / "containerd" / "containerd.sock"

    @property
    def kubeconfig(self) -> Path:
        """The kubelet's own kubeconfig: `system:node:<name>`, group `system:nodes`."""
        return self.directory / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's log folder: `<namespace>_<pod>_<uid>/<container>/<restart>.log`."""
        return self.directory / "pod-logs"

    def image(self, name: str) -> str:
        """`host:port/secureml-test/<name>@sha256:...` of one of the node's images."""
        return self.images[name]

    def log(self, lines: int = 60, program: str = "kubelet") -> str:
        path = self.directory / f"{program}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def ctr(self, *arguments: str) -> str:
        """`ctr` against this node's containerd, in the CRI's namespace `k8s.io`."""
        return _run(
            ["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *arguments], "ctr"
        ).stdout

    def request_as_node(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call to the API server with the kubelet's credential: (status, decoded JSON)."""
        return _request(
            self.cluster,
            method,
            path,
            body,
            (
                self.directory / "pki" / "kubelet-client.crt",
                self.directory / "pki" / "kubelet-client.key",
            ),
        )

    def allow_registry(self, host: str) -> None:
        """Let containerd pull from plain-HTTP registry `host` (`host:port`) from now on."""
        folder = self.directory / "containerd" / "certs.d" / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n[host."http://{host}"]\n  capabilities = ["pull", "resolve"]\n'
        )

    def mirror_registry(self, upstream: str, mirror: str) -> None:
        """Pull images named `upstream/...` (`ghcr.io`, `quay.io`) from plain-HTTP registry
        `mirror` (`host:port`), as a node behind a platform's pull-through mirror does: the pod
        keeps the image's real name, containerd asks the mirror first (`hosts.toml`)."""
        folder = self.directory / "containerd" / "certs.d" / upstream
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(
            f'server = "https://{upstream}"\n\n[host."http://{mirror}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, *, detach: bool = False, timeout_s: float = 120.0) -> None:
        began = time.monotonic()
        missing = missing_requirements()
        if missing:
            raise HarnessError("the test node needs " + "; ".join(missing))
        folder = binaries()
        modules = {module: module_binaries(module) for module in MODULES}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write_pki()
            self._start_registry(detach)
            self._mark("registry", began)
            self._build_images(folder, modules)
            self._mark("images", began)
            self._make_cgroups()
            self._start_containerd(detach)
            self._mark("containerd", began)
            self._start_kubelet(folder, detach)
            self._start_scheduler(folder, detach)
            self._wait_ready(began + timeout_s)
            self._mark("ready", began)
            if self._want_network_policies:
                self.network_policies = NodeNetworkPolicies(self, modules["network-policies"])
                self.network_policies.start(detach)
                self._mark("network-policies", began)
            if self._want_identity:
                self.identity = NodeIdentity(
                    self,
                    modules["spire"],
                    modules["spiffe-csi"],
                    modules["spire-controller-manager"] / "spire-controller-manager",
                )
                self.identity.start(detach)
                self._mark("identity", began)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        self._write_state()

    def _mark(self, what: str, began: float) -> None:
        self.timings[what] = round(time.monotonic() - began, 2)

    def stop(self) -> None:
        """Delete this node's pods (the kubelet tears their sandboxes and networks down), stop
        every program, and clean what they leave: mounts, cgroups, the bridge."""
        if "kubelet" in self._processes and self._processes["kubelet"].poll() is None:
            with contextlib.suppress(OSError, http.client.HTTPException, HarnessError):
                _drain(self.cluster, self.name, self.containerd_socket)
        for name in PROGRAMS:
            process = self._processes.pop(name, None)
            if process is not None:
                _terminate(process.pid, process)
        _clean_up(self.directory, self.cgroup_root, self.network.bridge)
        if self._owns_directory:
            _remove_tree(self.directory)

    def _write_pki(self) -> None:
        """The kubelet's client certificate (`system:node:<name>` in `system:nodes`), its serving
        certificate for the slot address, and kube-scheduler's client certificate."""
        pki = self.directory / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        cluster_pki = self.cluster.directory / "pki"
        shutil.copy(cluster_pki / "ca.crt", pki / "ca.crt")
        issued = {
            "kubelet-client": _sign(
                cluster_pki,
                f"system:node:{self.name}",
                organization="system:nodes",
                usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            ),
            "kubelet-serving": _sign(
                cluster_pki,
                self.name,
                usage=ExtendedKeyUsageOID.SERVER_AUTH,
                ips=(self.network.address,),
            ),
            "scheduler": _sign(
                cluster_pki, "system:kube-scheduler", usage=ExtendedKeyUsageOID.CLIENT_AUTH
            ),
        }
        ca = (pki / "ca.crt").read_bytes()
        for name, (certificate, key) in issued.items():
            (pki / f"{name}.crt").write_bytes(certificate)
            (pki / f"{name}.key").write_bytes(key)
            (pki / f"{name}.key").chmod(0o600)
        certificate, key = issued["kubelet-client"]
        self.kubeconfig.write_text(
            _kubeconfig(self.cluster.url, ca, certificate, key, f"system:node:{self.name}")
        )
        certificate, key = issued["scheduler"]
        (self.directory / "scheduler.kubeconfig").write_text(
            _kubeconfig(self.cluster.url, ca, certificate, key, "system:kube-scheduler")
        )

    def _start_registry(self, detach: bool) -> None:
        self.registry = f"127.0.0.1:{_free_port()}"
        folder = self.directory / "registry"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.yml").write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "warn"},
                    "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
                    "http": {"addr": self.registry},
                }
            )
        )
        registry = shutil.which("docker-registry")
        assert registry is not None
        self._spawn("docker-registry", [registry, "serve", str(folder / "config.yml")], detach)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.create_connection(("127.0.0.1", int(self.registry.split(":")[1])), 1):
                    return
            except OSError:
                time.sleep(0.05)
        raise HarnessError(f"docker-registry did not listen on {self.registry}")

    def _build_images(self, folder: Path, modules: dict[str, Path]) -> None:
        """Build `pause`, `busybox` and `agents` with buildah and push them; record their
        digests."""
        cache = Path(
            os.environ.get("SECUREML_HARNESS_CACHE", Path.home() / ".cache/secureml/harness")
        )
        cache.mkdir(parents=True, exist_ok=True)
        with (cache / ".node-images.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # buildah's tags: one build at a time per machine
            for name in ("pause", "busybox", "agents"):
                self.images[name] = self._build_image(name, folder, modules)

    def _build_image(self, name: str, folder: Path, modules: dict[str, Path]) -> str:
        context = self.directory / "images" / name
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(IMAGES / name, context)
        if name == "pause":
            _run(
                [
                    "cc",
                    "-static",
                    "-Os",
                    "-Wall",
                    "-o",
                    str(context / "pause"),
                    str(context / "pause.c"),
                ],
                "compiling pause.c",
            )
        elif name == "busybox":
            shutil.copy(BUSYBOX, context / "busybox")
            shutil.copy(folder / "apiprobe", context / "apiprobe")
            shutil.copy(modules["spiffe-csi"] / "svidprobe", context / "svidprobe")
            shutil.copy(modules["network-policies"] / "netprobe", context / "netprobe")
        else:  # agents: spire-agent and kube-network-policies, run as the node's pods
            files = agent_image_files(modules["spire"], modules["network-policies"])
            for target, source in files.items():
                (context / "root" / target).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, context / "root" / target)
        tag = f"localhost/secureml-test/{name}:latest"
        _run(
            [
                "buildah",
                "build",
                "--quiet",
                "--isolation",
                "chroot",
                "--timestamp",
                "0",
                "--format",
                "oci",
                "-t",
                tag,
                str(context),
            ],
            f"building the node's {name} image",
        )
        digest_file = context / "digest"
        repository = f"{self.registry}/secureml-test/{name}"
        _run(
            [
                "buildah",
                "push",
                "--quiet",
                "--tls-verify=false",
                "--digestfile",
                str(digest_file),
                tag,
                f"docker://{repository}:latest",
            ],
            f"pushing the node's {name} image",
        )
        return f"{repository}@{digest_file.read_text().strip()}"

    def _make_cgroups(self) -> None:
        """The kubelet's `cgroupRoot` must exist: `/secureml-node-N` in every v1 hierarchy (the
        kubelet makes `kubepods` below it), or once on v2."""
        for folder in _cgroup_folders(self.cgroup_root):
            folder.mkdir(exist_ok=True)
            if folder.parent.name == "cpuset":  # a new v1 cpuset has no cpus or mems until set
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (folder / knob).write_text((folder.parent / knob).read_text())

    def _start_containerd(self, detach: bool) -> None:
        base = self.directory / "containerd"
        cni = self.directory / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (base / "certs.d").mkdir(parents=True, exist_ok=True)
        self.allow_registry(self.registry)
        network = {
            "cniVersion": "1.0.0",
            "name": f"secureml-node-{self.network.slot}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.network.bridge,
                    "isGateway": True,
                    "ipMasq": False,  # pods reach this machine only (NodeNetwork's nft table)
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [
                            [{"subnet": self.network.subnet, "gateway": self.network.gateway}]
                        ],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(cni / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (cni / "net.d" / "10-secureml.conflist").write_text(json.dumps(network, indent=2) + "\n")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
oom_score = 0

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{self.containerd_socket}.ttrpc"

[debug]
  level = "info"

[metrics]
  address = ""

[{cri}]
  sandbox_image = "{self.images["pause"]}"
  # This VM withholds CAP_SYS_RESOURCE even from root: runc must not lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{shutil.which("runc")}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{cni / "net.d"}"
  max_conf_num = 1

[{cri}.registry]
  config_path = "{base / "certs.d"}"
"""
        (base / "config.toml").write_text(config)
        containerd = shutil.which("containerd")
        assert containerd is not None
        self._spawn("containerd", [containerd, "--config", str(base / "config.toml")], detach)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self._check_alive()
            if self.containerd_socket.is_socket():
                done = subprocess.run(
                    ["ctr", "--address", str(self.containerd_socket), "version"],
                    capture_output=True,
                    check=False,
                )
                if done.returncode == 0:
                    return
            time.sleep(0.1)
        raise HarnessError(
            f"containerd did not answer in time; its log ends:\n{self.log(30, 'containerd')}"
        )

    def _start_kubelet(self, folder: Path, detach: bool) -> None:
        pki = self.directory / "pki"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # this machine is cgroup v1 (no systemd): 1.36 refuses it otherwise
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.network.address,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": self.network.address,
            "healthzPort": 10248,
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "registerWithTaints": [dict(taint) for taint in self.taints],
            "podLogsDir": str(self.pod_logs),
            "clusterDomain": "cluster.local",
            "resolvConf": "",  # no DNS: pods reach this machine only
            "clusterDNS": [self.cluster_dns] if self.cluster_dns else [],
            "failSwapOn": False,
            "serializeImagePulls": False,
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "0s",
            "staticPodPath": "",
            "maxPods": 50,
        }
        (self.directory / "kubelet.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        labels = ",".join(f"{key}={value}" for key, value in self.labels.items())
        self._spawn(
            "kubelet",
            [
                str(folder / "kubelet"),
                f"--config={self.directory / 'kubelet.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.directory / 'kubelet'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.network.address}",
                *([f"--node-labels={labels}"] if labels else []),
                "--v=2",
            ],
            detach,
        )

    def _start_scheduler(self, folder: Path, detach: bool) -> None:
        kubeconfig = self.directory / "scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                str(folder / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
            detach,
        )

    def _spawn(
        self, name: str, command: list[str], detach: bool, env: dict[str, str] | None = None
    ) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        with log:
            self._processes[name] = subprocess.Popen(
                command,
                env={**os.environ, **env} if env else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
                preexec_fn=None if detach else _die_with_parent,
            )

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise HarnessError(
                    f"{name} exited with status {process.returncode}; its log ends:\n"
                    f"{self.log(40, name)}"
                )

    def _wait_ready(self, deadline: float) -> None:
        """Until the Node is Ready without the not-ready taint and `default` has
        `kube-root-ca.crt` (a pod's service-account token volume waits for it)."""
        last = "not registered yet"
        while time.monotonic() < deadline:
            self._check_alive()
            status, node = self.cluster.request("GET", f"/api/v1/nodes/{self.name}")
            if status == 200:
                ready = [
                    c
                    for c in node["status"].get("conditions", [])
                    if c["type"] == "Ready" and c["status"] == "True"
                ]
                taints = [t["key"] for t in node["spec"].get("taints", [])]
                published, _ = self.cluster.request(
                    "GET", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
                )
                if ready and "node.kubernetes.io/not-ready" not in taints and published == 200:
                    return
                last = f"Ready: {bool(ready)}, taints: {taints}, kube-root-ca.crt: HTTP {published}"
            time.sleep(0.1)
        raise HarnessError(
            f"node {self.name} was not ready in time ({last}); the kubelet's log ends:\n{self.log()}"
        )

    def _write_state(self) -> None:
        state = {
            "name": self.name,
            "slot": self.network.slot,
            "registry": self.registry,
            "images": self.images,
            "containerd_socket": str(self.containerd_socket),
            "pids": {name: process.pid for name, process in self._processes.items()},
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


# --- requests, teardown ----------------------------------------------------------------------


def _request(
    cluster: ControlPlane, method: str, path: str, body: Any, credential: tuple[Path, Path]
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(cluster.directory / "pki" / "ca.crt"))
    context.load_cert_chain(str(credential[0]), str(credential[1]))
    connection = http.client.HTTPSConnection(
        cluster.address, cluster.port, context=context, timeout=30
    )
    try:
        data = None if body is None else json.dumps(body).encode()
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        connection.request(
            method, path, body=data, headers={"Content-Type": content, "Accept": "application/json"}
        )
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    try:
        return response.status, json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return response.status, raw.decode(errors="replace")


def _drain(cluster: ControlPlane, node: str, socket_path: Path, timeout_s: float = 30.0) -> None:
    """Delete every pod bound to `node` at once and wait until containerd runs no task: the kubelet
    stops each sandbox through the CRI, which tears its network down (CNI DEL)."""
    selector = urllib.parse.quote(f"spec.nodeName={node}")
    status, pods = cluster.request("GET", f"/api/v1/pods?fieldSelector={selector}")
    if status != 200:
        return
    for pod in pods["items"]:
        meta = pod["metadata"]
        cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = subprocess.run(
            ["ctr", "--address", str(socket_path), "-n", "k8s.io", "tasks", "ls", "-q"],
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode != 0 or not listed.stdout.strip():
            return
        time.sleep(0.2)


def _cgroup_folders(root: str) -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # v2: one hierarchy
        return [base / root.lstrip("/")]
    return [
        entry / root.lstrip("/")
        for entry in sorted(base.iterdir())
        if entry.is_dir() and not entry.is_symlink() and (entry / "cgroup.procs").exists()
    ]


def _clean_up(directory: Path, cgroup_root: str, bridge: str) -> None:
    """What stopped programs leave: containers' processes and cgroups, mounts under
    `directory` and in /run/netns of its pods, the bridge."""
    for folder in _cgroup_folders(cgroup_root):
        if not folder.is_dir():
            continue
        for procs in folder.rglob("cgroup.procs"):  # runc's shims are gone with containerd
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    for folder in _cgroup_folders(cgroup_root):
        if folder.is_dir():
            for child in sorted(
                (p for p in folder.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                _rmdir_cgroup(child)
            _rmdir_cgroup(folder)
    for mount in _mounts_under(directory):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def _rmdir_cgroup(folder: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while killed processes exit
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


def _mounts_under(directory: Path) -> list[str]:
    """Mount points under `directory`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(directory.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(points, key=lambda p: -p.count("/"))


def _remove_tree(directory: Path) -> None:
    """rmtree, unless something is still mounted below (it would delete what is mounted there)."""
    if _mounts_under(directory):
        return
    shutil.rmtree(directory, ignore_errors=True)


# --- a control plane with a node, as one ---------------------------------------------------


@contextlib.contextmanager
def running_cluster_with_node(**node_options: Any) -> Iterator[tuple[ControlPlane, Node]]:
    """A control plane bound to a fresh node slot's address and a Ready node of it."""
    with NodeNetwork() as network:
        with ControlPlane(address=network.address, install_crds=False) as cluster:
            with Node(cluster, network, **node_options) as node:
                yield cluster, node


def down(directory: Path) -> list[str]:
    """Stop a control plane and node left running by `up` in `directory`."""
    from .argo import down as argo_down  # argo.py imports this module

    directory = directory.resolve()
    node_dir = directory / "node"
    stopped: list[str] = trainer_down(directory / "trainer", directory)
    stopped += argo_down(directory)
    state_path = node_dir / STATE_FILE
    if state_path.exists():
        state = json.loads(state_path.read_text())
        if (directory / CONTROLPLANE_STATE).exists():
            cluster = ControlPlane(directory)
            url = json.loads((directory / CONTROLPLANE_STATE).read_text())["url"]
            parsed = urllib.parse.urlsplit(url)
            cluster.address, cluster.port = parsed.hostname or "", parsed.port or 0
            with contextlib.suppress(OSError, http.client.HTTPException, HarnessError):
                _drain(cluster, state["name"], Path(state["containerd_socket"]))
        for name in PROGRAMS:
            pid = state["pids"].get(name)
            if pid is not None and _ours(pid, node_dir):
                _terminate(pid)
                stopped.append(name)
        slot = int(state["slot"])
        _clean_up(node_dir, f"/secureml-node-{slot}", f"smlnode{slot}")
        release(slot)
        state_path.unlink()
    stopped += controlplane_down(directory)
    return stopped


def _main(argv: Iterator[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.node")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster")
    args = parser.parse_args(list(argv) if argv is not None else None)
    directory: Path = args.dir.resolve()
    if args.action == "down":
        stopped = down(directory)
        print(f"stopped {', '.join(stopped)}" if stopped else f"nothing running in {directory}")
        return 0
    down(directory)
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    _remove_tree(directory / "node")  # the last run's containers and pod volumes: a fresh node
    if (directory / "node").exists():
        print(f"error: {directory / 'node'} still has mounts; unmount them first", file=sys.stderr)
        return 1
    directory.mkdir(parents=True, exist_ok=True)
    network = NodeNetwork(keep=True)
    try:
        with network:
            cluster = ControlPlane(directory, address=network.address)
            cluster.start(detach=True)
            node = Node(cluster, network, directory / "node")
            controllers = TrainerControllers(cluster, directory / "trainer")
            try:
                node.start(detach=True)
                controllers.start(detach=True)
            except BaseException:
                node.stop()
                cluster.stop()
                release(network.slot)
                raise
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    from .argo import up as argo_up  # argo.py imports this module

    try:
        argo = argo_up(cluster, node, directory)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        down(directory)
        return 1
    kubeconfig, where = os.path.relpath(cluster.kubeconfig), os.path.relpath(directory)
    print(f"kube-apiserver {cluster.url} ready in {cluster.started_in_s:.1f} s")
    print(f"node {node.name} Ready in {node.started_in_s:.1f} s; images: {node.registry}")
    print(
        f"Argo workflow-controller {argo.started_in_s:.1f} s (log: "
        f"{os.path.relpath(argo.log_path)}); argoexec and the KFP STAND-INs mirrored"
    )
    for name, reference in node.images.items():
        print(f"  {name}: {reference}")
    print(f"kubeconfig: {kubeconfig} (logs: {where}/*.log, {where}/node/*.log)")
    print(
        f"pod logs: {where}/node/pod-logs/; containers: ctr --address {node.containerd_socket} -n k8s.io c ls"
    )
    if node.identity is not None:
        print(
            f"SPIRE: agent {node.identity.agent_id()} (pod secureml-system/spire-agent), "
            f"server socket {os.path.relpath(node.identity.server_socket)}; CSI driver "
            "csi.spiffe.io registered"
        )
    if node.network_policies is not None:
        print(
            "NetworkPolicy: kube-network-policies (pod secureml-system/kube-network-policies), "
            f"nft list table inet {node.network_policies.table}; outside addresses "
            f"{', '.join(node.network.outside_addresses)} (netns {node.network.outside_namespace})"
        )
    print(
        f"Trainer v2.3.0 and JobSet v0.12.0 controllers ready in {controllers.started_in_s:.1f} s "
        f"(logs: {where}/trainer/*.log); no cluster DNS (tests/harness/cluster_dns.py)"
    )
    print(
        "pods must tolerate " + ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in TAINTS)
    )
    print(f"stop it: make cluster-down (python -m tests.harness.node down --dir {where})")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
