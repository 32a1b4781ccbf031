"""A real Kubernetes control plane for the tests: etcd and kube-apiserver v1.36 on loopback.

The binaries come from `tests/harness/build.sh controlplane` (built once per machine from the Go
module proxy) or from the folder named by SECUREML_HARNESS_BIN; `ControlPlane(version="1.34")` runs
`controlplane-1.34`'s, with MutatingAdmissionPolicy's feature gate and v1beta1 API group on (beta
there, off by default). `ControlPlane` generates its own
PKI (a CA, a serving certificate for 127.0.0.1/localhost and the bind address, an admin client
certificate in `system:masters`, the API server's client certificate towards kubelets, a
service-account signing key; the CA's key is kept for tests/harness/node.py), starts etcd without
fsync on free loopback ports, starts kube-apiserver (on 127.0.0.1, or `address`) with the Node
authorizer and RBAC and the admission plugins a platform runs (NodeRestriction, PodSecurity,
LimitRanger, ResourceQuota, ServiceAccount, ValidatingAdmissionPolicy, MutatingAdmissionPolicy: all
GA and on by default in 1.36, named explicitly so a default change cannot silently drop one), waits
for /readyz,
installs the real CRDs of ../shared/fixtures/crds and waits until they are Established (a CRD that
converts through a webhook, which nothing runs here, gets strategy None when its versions share one
schema).

kube-controller-manager runs only the controllers the tests need (CONTROLLERS: default service
accounts, ResourceQuota usage, namespace deletion, VAP type checking, and for a node: node
lifecycle, `kube-root-ca.crt` publishing); no scheduler and no nodes, so pods stay Pending, unless
tests/harness/node.py runs a node beside it. Its service-account controller creates a namespace's `default` service account
(which the ServiceAccount admission plugin needs before it admits a pod) a moment after the
namespace: `create_namespace` creates it at once, so a test can create pods straight away; after
applying a ResourceQuota, `wait_for_quotas` waits for its usage (pods are refused until then).

    python -m tests.harness.controlplane up [--dir .cluster]    # leaves it running, writes kubeconfig
    python -m tests.harness.controlplane down [--dir .cluster]
"""

from __future__ import annotations

import argparse
import base64
import datetime
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
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .built import HarnessError, built
from .service import Service

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CRDS = Path(os.environ.get("SECUREML_HARNESS_CRDS", ROOT.parent / "shared" / "fixtures" / "crds"))
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "NodeRestriction",  # a kubelet writes only its own Node and the pods bound to it
    "PodSecurity",
    "LimitRanger",
    "ServiceAccount",
    "ResourceQuota",
    "MutatingAdmissionPolicy",
    "ValidatingAdmissionPolicy",
)
# Stopped in this order. kube-controller-manager runs only the controllers tests need.
PROGRAMS = ("kube-controller-manager", "kube-apiserver", "etcd")
# The API server's audit log keeps each pod create with the pod as sent (`pod_create_requests`):
# what a controller such as Argo tried to create, also where admission refused it.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Request",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods"]}],
        },
        {"level": "None"},
    ],
}
CONTROLLERS = (
    "serviceaccount-controller",  # a namespace's `default` service account
    "resourcequota-controller",  # quota usage: ResourceQuota admission refuses pods until it is there
    "namespace-controller",  # deleting a namespace deletes its objects
    "validatingadmissionpolicy-status-controller",  # status.typeChecking of every VAP
    # For the node (tests/harness/node.py): a kubelet's Node loses its not-ready taint once Ready,
    # and every namespace gets `kube-root-ca.crt`, which a pod's service-account token volume needs.
    "node-lifecycle-controller",
    "root-ca-cert-publisher",
)
# The Node authorizer first, as a platform runs it: a kubelet's `system:node:<name>` certificate
# reads only what its own pods use.
AUTHORIZATION_MODES = ("Node", "RBAC")
STATE_FILE = "controlplane.json"
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


# The versions built by tests/harness/build.sh: module folder, and the kube-apiserver flags that
# version needs for MutatingAdmissionPolicy (beta in 1.34, behind its feature gate and API group).
VERSIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "1.36": ("controlplane", ()),
    "1.34": (
        "controlplane-1.34",
        (
            "--feature-gates=MutatingAdmissionPolicy=true",
            "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
        ),
    ),
}


def binaries(version: str = "1.36") -> Path:
    """The folder holding PROGRAMS: SECUREML_HARNESS_BIN, else build.sh's cache."""
    override = os.environ.get("SECUREML_HARNESS_BIN") if version == "1.36" else None
    return built(VERSIONS[version][0], PROGRAMS, override=override)


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


# The Service range; its first address is the `kubernetes` Service's, which in-cluster clients
# (KUBERNETES_SERVICE_HOST) dial, so the serving certificate names it, as kubeadm's does.
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"


def _write_pki(folder: Path, address: str = "127.0.0.1") -> None:
    """CA, serving and client certificates, and the service-account signing key.

    The CA's key is kept (`ca.key`) for the node harness, which signs its kubelet's certificates
    with it, as a cluster's CA signs a joining node's. `kubelet-client` is the API server's own
    certificate towards kubelets (logs, exec)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secureml-test-ca")])
    ca = _certificate(ca_name, ca_key, None, ca=True)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        serving_key,
        (ca_name, ca_key),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        names=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
            *(
                x509.IPAddress(ipaddress.ip_address(ip))
                for ip in dict.fromkeys(("127.0.0.1", address, KUBERNETES_SERVICE_IP))
            ),
        ],
    )
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _certificate(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "secureml-admin"),
            ]
        ),
        admin_key,
        (ca_name, ca_key),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    kubelet_client_key = ec.generate_private_key(ec.SECP256R1())
    kubelet_client = _certificate(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
            ]
        ),
        kubelet_client_key,
        (ca_name, ca_key),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    files = {
        "ca.crt": ca.public_bytes(pem),
        "ca.key": _pem_key(ca_key),
        "serving.crt": serving.public_bytes(pem),
        "serving.key": _pem_key(serving_key),
        "admin.crt": admin.public_bytes(pem),
        "admin.key": _pem_key(admin_key),
        "kubelet-client.crt": kubelet_client.public_bytes(pem),
        "kubelet-client.key": _pem_key(kubelet_client_key),
        "sa.key": _pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            pem, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o600)


class ControlPlane(Service):
    """etcd + kube-apiserver on loopback; `with ControlPlane() as cluster: ...`.

    `directory` holds the PKI, the kubeconfig, etcd's data and both logs; a temporary folder (on
    /dev/shm where there is one) is made and removed when none is given. `address` is where
    kube-apiserver listens: loopback unless pods must reach it (tests/harness/node.py gives an
    address of its node network, which must exist on this machine before `start`).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        install_crds: bool = True,
        version: str = "1.36",
        address: str = "127.0.0.1",
    ) -> None:
        if version not in VERSIONS:
            raise HarnessError(f"no test control plane of Kubernetes {version}: {sorted(VERSIONS)}")
        self.version = version
        self._owns_directory = directory is None
        self.directory = Path(directory) if directory else self._temporary_directory()
        self.install_crds = install_crds
        self.address = address
        self.port = 0
        self.etcd_port = 0
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started_in_s = 0.0

    @staticmethod
    def _temporary_directory() -> Path:
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        return Path(tempfile.mkdtemp(prefix="secureml-controlplane-", dir=base))

    # --- what callers use -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def log_path(self) -> Path:
        return self.directory / "kube-apiserver.log"

    def log(self, lines: int = 60, program: str = "kube-apiserver") -> str:
        """The last `lines` lines of `program`'s log (one of PROGRAMS)."""
        path = self.directory / f"{program}.log"
        if not path.exists():
            return ""
        text = path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def pod_create_requests(self) -> list[dict[str, Any]]:
        """The audit events of every pod create so far (`AUDIT_POLICY`): each has the pod as
        its creator sent it (`requestObject`: decoded with the server's defaults, before
        admission), the user and the answer
        (`responseStatus`), also for a create that admission refused."""
        path = self.directory / "audit.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def api_client(self) -> Any:
        """A kubernetes-client ApiClient authenticated as the cluster admin."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def request(
        self, method: str, path: str, body: Any = None, as_user: str | None = None
    ) -> tuple[int, Any]:
        """One admin call to the API server: (HTTP status, decoded JSON body). `as_user`: the
        admin impersonates that user (in `system:masters`, so that RBAC lets it), as a pipeline
        runner creating step pods (`secureml.pipelineIdentity`)."""
        context = ssl.create_default_context(cafile=str(self.directory / "pki" / "ca.crt"))
        context.load_cert_chain(
            str(self.directory / "pki" / "admin.crt"), str(self.directory / "pki" / "admin.key")
        )
        connection = http.client.HTTPSConnection(
            self.address, self.port, context=context, timeout=30
        )
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if as_user is not None:
                headers["Impersonate-User"] = as_user
                headers["Impersonate-Group"] = "system:masters"
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return response.status, raw.decode(errors="replace")

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Create namespace `name` (if absent) and its `default` service account.

        The controller manager creates that service account too, but a moment later, and the
        ServiceAccount admission plugin refuses every pod of a namespace that lacks it.
        """
        namespace: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
        }
        if labels:
            namespace["metadata"]["labels"] = labels
        self._create("/api/v1/namespaces", namespace)
        self.create_default_service_account(name)

    def wait_for_quotas(self, namespace: str, timeout_s: float = 30.0) -> None:
        """Wait until kube-controller-manager has computed every ResourceQuota of `namespace`:
        until then the ResourceQuota admission plugin refuses pods ("status unknown for quota")."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, quotas = self.request("GET", f"/api/v1/namespaces/{namespace}/resourcequotas")
            if status != 200:
                raise HarnessError(f"listing the quotas of {namespace}: HTTP {status}: {quotas}")
            waiting = [
                quota["metadata"]["name"]
                for quota in quotas["items"]
                if set((quota.get("status") or {}).get("hard") or {})
                != set(quota["spec"].get("hard") or {})
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise HarnessError(f"ResourceQuotas {waiting} of {namespace} got no status in time")
            time.sleep(0.2)

    def create_default_service_account(self, namespace: str) -> None:
        """What the controller manager's service-account controller would do for `namespace`."""
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        self._create(f"/api/v1/namespaces/{namespace}/serviceaccounts", account)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, *, detach: bool = False, timeout_s: float = 90.0) -> None:
        """Start etcd and kube-apiserver and wait until the server is ready with every CRD.

        `detach` starts them in their own session so they outlive this process (`up`).
        """
        began = time.monotonic()
        folder = binaries(self.version)
        if self.install_crds:  # parsed while the servers start
            reading = threading.Thread(target=_read_crds, daemon=True)
            reading.start()
        try:
            _write_pki(self.directory / "pki", self.address)
            self._start_etcd(folder, detach)
            self._start_apiserver(folder, detach)
            self._write_kubeconfig()
            self._wait_ready(began + timeout_s)
            self._start_controller_manager(folder, detach)
            if self.install_crds:
                self._install_crds(began + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        self._write_state()

    def stop(self) -> None:
        """Stop every process (etcd last) and remove a temporary directory."""
        for name in PROGRAMS:
            process = self._processes.pop(name, None)
            if process is not None:
                _terminate(process.pid, process)
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def restart_apiserver(self, timeout_s: float = 90.0) -> float:
        """Stop kube-apiserver (SIGTERM) and start it again as it was (same flags, port and
        etcd: its state survives); the seconds until it is ready again."""
        began = time.monotonic()
        process = self._processes.pop("kube-apiserver")
        _terminate(process.pid, process)
        self._spawn("kube-apiserver", [str(arg) for arg in process.args], detach=False)
        self._wait_ready(began + timeout_s)
        return time.monotonic() - began

    def _start_etcd(self, folder: Path, detach: bool) -> None:
        self.etcd_port, peer = _free_port(), _free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(folder / "etcd"),
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            detach,
        )

    def _start_apiserver(self, folder: Path, detach: bool) -> None:
        self.port = _free_port(self.address)
        pki = self.directory / "pki"
        (self.directory / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        self._spawn(
            "kube-apiserver",
            [
                str(folder / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.port}",
                f"--cert-dir={self.directory / 'serving'}",
                f"--tls-cert-file={pki / 'serving.crt'}",
                f"--tls-private-key-file={pki / 'serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--authorization-mode={','.join(AUTHORIZATION_MODES)}",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                # towards kubelets (pod logs, exec): the API server's own client certificate, and
                # the kubelet's serving certificate checked against the cluster CA, at its node IP
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *VERSIONS[self.version][1],
                "--allow-privileged=true",  # as a platform runs it: admission, not validation, decides
                f"--audit-policy-file={self.directory / 'audit-policy.json'}",
                f"--audit-log-path={self.directory / 'audit.log'}",
            ],
            detach,
        )

    def _start_controller_manager(self, folder: Path, detach: bool) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(folder / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--root-ca-file={self.directory / 'pki' / 'ca.crt'}",  # root-ca-cert-publisher
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
            ],
            detach,
        )

    def _spawn(self, name: str, command: list[str], detach: bool) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        with log:
            self._processes[name] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=detach,
                preexec_fn=None if detach else _die_with_parent,
            )

    def _write_kubeconfig(self) -> None:
        pki = self.directory / "pki"

        def data(name: str) -> str:
            return base64.b64encode((pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "secureml-test",
                    "cluster": {"server": self.url, "certificate-authority-data": data("ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "secureml-admin",
                    "user": {
                        "client-certificate-data": data("admin.crt"),
                        "client-key-data": data("admin.key"),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "secureml-test",
                    "context": {"cluster": "secureml-test", "user": "secureml-admin"},
                }
            ],
            "current-context": "secureml-test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                tail = (self.directory / f"{name}.log").read_text(errors="replace")[-4000:]
                raise HarnessError(f"{name} exited with status {process.returncode}:\n{tail}")

    def _wait_ready(self, deadline: float) -> None:
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                status, body = self.request("GET", "/readyz")
                if status == 200:
                    return
                last = f"HTTP {status}: {body}"
            except (OSError, http.client.HTTPException) as error:  # not listening yet
                last = str(error)
            time.sleep(0.1)
        raise HarnessError(
            f"kube-apiserver at {self.url} was not ready in time ({last}); its log ends:\n"
            f"{self.log()}"
        )

    def _install_crds(self, deadline: float) -> None:
        # Created concurrently: each large CRD costs the server a schema build, and in turn the
        # start waits on the slowest rather than on the sum.
        definitions = _crds()
        with ThreadPoolExecutor(max_workers=len(definitions) or 1) as pool:
            list(pool.map(partial(self._create, _CRD_PATH), definitions))
        names = [definition["metadata"]["name"] for definition in definitions]
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                _, crd = self.request("GET", f"{_CRD_PATH}/{name}")
                conditions = ((crd or {}).get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            if pending:
                time.sleep(0.1)
        if pending:
            raise HarnessError(f"CRDs not Established in time: {', '.join(sorted(pending))}")

    def _create(self, path: str, body: dict[str, Any]) -> None:
        status, answer = self.request("POST", path, body)
        if status not in (200, 201, 409):  # 409: it exists already
            name = body.get("metadata", {}).get("name")
            raise HarnessError(
                f"creating {body.get('kind')} {name} failed: HTTP {status}: {answer}"
            )

    # --- up / down across processes ---------------------------------------------------------

    def _write_state(self) -> None:
        state = {
            "url": self.url,
            "pids": {name: process.pid for name, process in self._processes.items()},
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


@cache
def _read_crds() -> tuple[str, ...]:
    """Every CustomResourceDefinition of CRDS as JSON text (read once per process)."""
    if not CRDS.is_dir():
        raise HarnessError(f"{CRDS} is absent: the real CRDs come from ../shared/fixtures/crds")
    found = []
    for path in sorted(CRDS.glob("*.yaml")):
        for document in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            if document and document.get("kind") == "CustomResourceDefinition":
                found.append(json.dumps(document))
    return tuple(found)


def _crds() -> list[dict[str, Any]]:
    return [_without_conversion_webhook(json.loads(text)) for text in _read_crds()]


def _without_conversion_webhook(crd: dict[str, Any]) -> dict[str, Any]:
    """No webhook runs here, so a CRD converting through one (policy-controller's
    ClusterImagePolicy: v1alpha1 stored, v1beta1 served) gets strategy None instead. That is
    faithful only when every version has the same schema; otherwise the start fails."""
    conversion = crd["spec"].get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return crd
    schemas = {json.dumps(v.get("schema"), sort_keys=True) for v in crd["spec"]["versions"]}
    if len(schemas) != 1:
        raise HarnessError(
            f"CRD {crd['metadata']['name']} converts between different schemas through a webhook, "
            "which the test control plane does not run"
        )
    crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so a crashed worker leaks no server."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _terminate(pid: int, process: subprocess.Popen[bytes] | None = None) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process is not None:
            if process.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    if process is not None:
        process.wait()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _ours(pid: int, directory: Path) -> bool:
    """Whether `pid` is still one of the processes started for `directory` (not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return str(directory) in command


def down(directory: Path) -> list[str]:
    """Stop a control plane left running by `up` in `directory`; the names of what was stopped."""
    directory = directory.resolve()
    state_path = directory / STATE_FILE
    if not state_path.exists():
        return []
    stopped = []
    pids: dict[str, int] = json.loads(state_path.read_text())["pids"]
    for name in PROGRAMS:
        pid = pids.get(name)
        if pid is not None and _ours(pid, directory):
            _terminate(pid)
            stopped.append(name)
    state_path.unlink()
    return stopped


def _main(argv: Iterator[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.controlplane")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster")
    args = parser.parse_args(list(argv) if argv is not None else None)
    directory: Path = args.dir.resolve()
    if args.action == "down":
        stopped = down(directory)
        print(f"stopped {', '.join(stopped)}" if stopped else f"no control plane in {directory}")
        return 0
    if (directory / STATE_FILE).exists():
        down(directory)
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    cluster = ControlPlane(directory)
    try:
        cluster.start(detach=True)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    kubeconfig, where = os.path.relpath(cluster.kubeconfig), os.path.relpath(directory)
    print(f"kube-apiserver {cluster.url} ready in {cluster.started_in_s:.1f} s")
    print(f"kubeconfig: {kubeconfig} (logs: {where}/*.log); try it:")
    print(f"  secureml profile apply profiles/team-a.yaml --kubeconfig {kubeconfig}")
    print(f"  secureml check-pod POD.yaml --server --kubeconfig {kubeconfig}")
    print(f"stop it: make cluster-down (python -m tests.harness.controlplane down --dir {where})")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
