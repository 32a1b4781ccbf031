"""Kubeflow Trainer v2.3.0 and JobSet v0.12.0 against a test control plane, as a platform runs them.

`tests/harness/build.sh trainer` builds `trainer-controller-manager` and JobSet's controller from
the Go module proxy (tests/harness/trainer/go.mod: Trainer v2.3.0 pins JobSet v0.12.0).
`TrainerControllers(cluster, directory)` (a context manager; `start()` / `stop()`) then:

- installs their CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime, JobSet) from their own
  modules in the Go module cache (`go mod download`; nothing of theirs is kept in the repository),
  where the control plane has not already installed the same ones from ../shared/fixtures/crds;
- runs a second kube-controller-manager with only the controllers these need and the control
  plane leaves out: `job-controller` (JobSet's Jobs make the pods) and
  `garbage-collector-controller` (a deleted TrainJob takes its JobSet, Jobs, pods and the
  NetworkPolicy it owns with it);
- starts JobSet's controller and Trainer's controller manager with the admin kubeconfig, leader
  election off, metrics off, health probes and webhook servers on 127.0.0.1. Both controllers
  refuse to start their controllers until their webhook servers have certificates; their own
  certificate rotation (`internalCertManagement`, `certManagement`) patches webhook
  configurations that name an in-cluster Service, which nothing routes to here. So rotation is
  off and the harness provides the certificates: a CA and a serving certificate for 127.0.0.1
  made with `cryptography` at every start, in JobSet's `webhook.certDir` and in Trainer's fixed
  default folder (`$TMPDIR/k8s-webhook-server/serving-certs`, TMPDIR pointed at a folder of ours);
- registers their webhook configurations from their own manifests (Trainer's
  `manifests/base/webhook`, JobSet's `config/components/webhook` with its patches: the pod
  webhooks select JobSet's pods only), each `clientConfig` pointed at the server's URL on
  127.0.0.1 with the CA; failurePolicy stays Fail, as shipped;
- creates Trainer's own `torch-distributed` ClusterTrainingRuntime
  (`manifests/base/runtimes/torch_distributed.yaml`) with one change, as a platform running
  secureml must make: its node pods `restartPolicy: Never` (`RUNTIME_RESTART_POLICY`).

`stop()` deletes the webhook configurations first (the API server would otherwise refuse what they
match), then stops the programs. `up(directory)` / `down(directory)` do the same across processes
for `make cluster-up` (tests/harness/node.py).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import controlplane
from .built import built
from .controlplane import ControlPlane, HarnessError
from .go_modules import module_dir
from .service import Service

HERE = Path(__file__).resolve().parent
TRAINER_MODULE = "github.com/kubeflow/trainer/v2@v2.3.0"
JOBSET_MODULE = "sigs.k8s.io/jobset@v0.12.0"
TRAINER_CRDS = (
    "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
    "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
)
JOBSET_CRDS = ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",)
TORCH_RUNTIME = "manifests/base/runtimes/torch_distributed.yaml"
# (module, manifests, {kind: patch file}, name prefix) of each controller's webhooks.
WEBHOOKS = {
    "trainer": (
        TRAINER_MODULE,
        "manifests/base/webhook/manifests.yaml",
        {
            "MutatingWebhookConfiguration": "manifests/base/webhook/patch_mutating.yaml",
            "ValidatingWebhookConfiguration": "manifests/base/webhook/patch_validating.yaml",
        },
        "",
    ),
    "jobset": (
        JOBSET_MODULE,
        "config/components/webhook/manifests.yaml",
        {
            "MutatingWebhookConfiguration": "config/components/webhook/patches/mutating-patch.yaml",
            "ValidatingWebhookConfiguration": (
                "config/components/webhook/patches/validating-patch.yaml"
            ),
        },
        "jobset-",  # config/default's namePrefix
    ),
}
# Trainer's runtime sets no restartPolicy, so JobSet's webhook defaults it to OnFailure, and the
# tenant's pod rules refuse a step pod that restarts (`secureml.noRestart`): a platform running
# secureml sets Never in the runtimes it offers (docs/trainer.md), the TrainJob cannot (the
# patch's schema has no restartPolicy). The harness installs the runtime so.
RUNTIME_RESTART_POLICY = "Never"
JOB_CONTROLLERS = ("job-controller", "garbage-collector-controller")
PROGRAMS = ("trainer-controller-manager", "jobset-controller", "kube-controller-manager-jobs")
STATE_FILE = "trainer-controllers.json"
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_WEBHOOK_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}


def binaries() -> Path:
    """The folder holding trainer-controller-manager and jobset-controller (built once)."""
    return built("trainer", ("trainer-controller-manager", "jobset-controller"))


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> None:
    """The `add` and `replace` operations of a kustomize JSON 6902 patch, in place."""
    for operation in operations:
        if operation["op"] not in ("add", "replace"):
            raise HarnessError(f"unexpected patch operation {operation}")
        *parents, last = operation["path"].strip("/").split("/")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = operation["value"]
        else:
            target[last] = operation["value"]


def webhook_configurations(controller: str, url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The controller's webhook configurations as shipped (patches applied), each webhook's
    `clientConfig` pointed at `url` + its path, trusting `ca_bundle` (PEM)."""
    import base64

    module, manifests, patches, prefix = WEBHOOKS[controller]
    folder = module_dir(module)
    found = []
    for document in _documents(folder / manifests):
        _json_patch(document, yaml.safe_load((folder / patches[document["kind"]]).read_text()))
        document["metadata"]["name"] = prefix + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": url + path,
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
        found.append(document)
    return found


def _serving_pki(folder: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 (`tls.crt`, `tls.key` in `folder`); the CA
    certificate's PEM."""
    import ipaddress

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secureml-test-webhooks")])
    ca = controlplane._certificate(ca_name, ca_key, None, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    serving = controlplane._certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
        key,
        (ca_name, ca_key),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        names=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    folder.mkdir(parents=True, exist_ok=True)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (folder / "tls.crt").write_bytes(serving.public_bytes(serialization.Encoding.PEM) + ca_pem)
    (folder / "tls.key").write_bytes(controlplane._pem_key(key))
    (folder / "ca.crt").write_bytes(ca_pem)
    return ca_pem


def torch_runtime() -> dict[str, Any]:
    """Trainer's `torch-distributed` ClusterTrainingRuntime, its node pods `restartPolicy: Never`
    (`RUNTIME_RESTART_POLICY`)."""
    runtime = _documents(module_dir(TRAINER_MODULE) / TORCH_RUNTIME)[0]
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        if "restartPolicy" in pod:
            raise HarnessError(
                f"{TORCH_RUNTIME} now sets restartPolicy: check RUNTIME_RESTART_POLICY"
            )
        pod["restartPolicy"] = RUNTIME_RESTART_POLICY
    return runtime


class TrainerControllers(Service):
    """Trainer's and JobSet's controllers (and the Job controller) for `cluster`; the module's
    docstring says what runs and why."""

    def __init__(self, cluster: ControlPlane, directory: Path, bin_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.directory = Path(directory).resolve()
        self.bin_dir = bin_dir
        self.ports: dict[str, int] = {}
        self.webhooks: list[tuple[str, str]] = []  # (kind, name) registered
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started_in_s = 0.0

    def log(self, program: str, lines: int = 40) -> str:
        path = self.directory / f"{program}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def start(self, *, detach: bool = False, timeout_s: float = 120.0) -> None:
        began = time.monotonic()
        folder = self.bin_dir or binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._install_crds(began + timeout_s)
            ca = _serving_pki(self.directory / "certs")
            trainer_certs = self.directory / "trainer-tmp" / "k8s-webhook-server" / "serving-certs"
            trainer_certs.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                (trainer_certs / name).write_bytes((self.directory / "certs" / name).read_bytes())
            for name in ("trainer-health", "trainer-webhook", "jobset-health", "jobset-webhook"):
                self.ports[name] = controlplane._free_port()
            self._start_job_controllers(detach)
            self._start_jobset(folder, detach)
            self._start_trainer(folder, detach)
            deadline = began + timeout_s
            for program, port in (
                ("jobset-controller", self.ports["jobset-health"]),
                ("trainer-controller-manager", self.ports["trainer-health"]),
            ):
                self._wait_ready(program, port, deadline)
            for controller in ("jobset", "trainer"):
                url = f"https://127.0.0.1:{self.ports[f'{controller}-webhook']}"
                for document in webhook_configurations(controller, url, ca):
                    self._create(_WEBHOOK_PATHS[document["kind"]], document)
                    self.webhooks.append((document["kind"], document["metadata"]["name"]))
            runtime = torch_runtime()
            self._create_when_served(
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", runtime, deadline
            )
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        self._write_state()

    def stop(self) -> None:
        for kind, name in self.webhooks:
            with contextlib.suppress(OSError, HarnessError):
                self.cluster.request("DELETE", f"{_WEBHOOK_PATHS[kind]}/{name}")
        self.webhooks = []
        for name in PROGRAMS:
            process = self._processes.pop(name, None)
            if process is not None:
                controlplane._terminate(process.pid, process)
        (self.directory / STATE_FILE).unlink(missing_ok=True)

    # --- the parts --------------------------------------------------------------------------

    def _install_crds(self, deadline: float) -> None:
        names = []
        for module, paths in ((TRAINER_MODULE, TRAINER_CRDS), (JOBSET_MODULE, JOBSET_CRDS)):
            folder = module_dir(module)
            for path in paths:
                crd = _documents(folder / path)[0]
                self._create(_CRD_PATH, crd)
                names.append(crd["metadata"]["name"])
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                _, crd = self.cluster.request("GET", f"{_CRD_PATH}/{name}")
                conditions = ((crd or {}).get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            if pending:
                time.sleep(0.2)
        if pending:
            raise HarnessError(f"CRDs not Established in time: {', '.join(sorted(pending))}")

    def _create(self, path: str, body: dict[str, Any]) -> None:
        status, answer = self.cluster.request("POST", path, body)
        if status == 409 and body["kind"] != "CustomResourceDefinition":
            name = body["metadata"]["name"]
            status, answer = self.cluster.request("DELETE", f"{path}/{name}")
            status, answer = self.cluster.request("POST", path, body)
        if status not in (200, 201, 409):
            raise HarnessError(
                f"creating {body['kind']} {body['metadata']['name']}: HTTP {status}: {answer}"
            )

    def _create_when_served(self, path: str, body: dict[str, Any], deadline: float) -> None:
        """Create through the controller's webhook, retrying while the server does not reach it
        yet (its first calls may race the webhook configuration's registration)."""
        while True:
            status, answer = self.cluster.request("POST", path, body)
            if status in (201, 409):
                return
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"creating {body['kind']} {body['metadata']['name']}: HTTP {status}: {answer}\n"
                    + self.log("trainer-controller-manager")
                )
            time.sleep(0.5)

    def _spawn(
        self, name: str, command: list[str], detach: bool, env: dict[str, str] | None = None
    ) -> None:
        with (self.directory / f"{name}.log").open("wb") as log:
            self._processes[name] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), **(env or {})},
                start_new_session=detach,
                preexec_fn=None if detach else controlplane._die_with_parent,
            )

    def _start_job_controllers(self, detach: bool) -> None:
        folder = controlplane.binaries()
        self._spawn(
            "kube-controller-manager-jobs",
            [
                str(folder / "kube-controller-manager"),
                f"--kubeconfig={self.cluster.kubeconfig}",
                f"--controllers={','.join(JOB_CONTROLLERS)}",
                "--leader-elect=false",
                "--secure-port=0",
                # as system:serviceaccount:kube-system:job-controller, the one creator of trainer
                # node pods that secureml.pipelineIdentity admits (secureml/rules/identity.py)
                "--use-service-account-credentials=true",
                # names this folder, so that `down` recognises the process as its own
                f"--cert-dir={self.directory / 'kcm-certs'}",
            ],
            detach,
        )

    def _start_jobset(self, folder: Path, detach: bool) -> None:
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['jobset-health']}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.ports["jobset-webhook"],
                "certDir": str(self.directory / "certs"),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
        path = self.directory / "jobset-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn(
            "jobset-controller",
            [str(folder / "jobset-controller"), f"--config={path}", "--zap-log-level=info"],
            detach,
        )

    def _start_trainer(self, folder: Path, detach: bool) -> None:
        config = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {
                "healthProbeBindAddress": f"127.0.0.1:{self.ports['trainer-health']}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.ports["trainer-webhook"]},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
        }
        path = self.directory / "trainer-config.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn(
            "trainer-controller-manager",
            [str(folder / "trainer-controller-manager"), f"--config={path}"],
            detach,
            env={"TMPDIR": str(self.directory / "trainer-tmp")},  # its webhook's certificates
        )

    def _wait_ready(self, program: str, port: int, deadline: float) -> None:
        """The program's /readyz answers 200 (after its webhook server is listening), and its
        webhook port accepts TLS."""
        while time.monotonic() < deadline:
            process = self._processes[program]
            if process.poll() is not None:
                raise HarnessError(f"{program} exited ({process.returncode}):\n{self.log(program)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200 and self._webhook_listens(program):
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise HarnessError(f"{program} not ready in time:\n{self.log(program)}")

    def _webhook_listens(self, program: str) -> bool:
        port = self.ports["jobset-webhook" if program == "jobset-controller" else "trainer-webhook"]
        context = ssl.create_default_context(cafile=str(self.directory / "certs" / "ca.crt"))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return True
        except OSError:
            return False

    # --- up / down across processes ---------------------------------------------------------

    def _write_state(self) -> None:
        state = {
            "pids": {name: process.pid for name, process in self._processes.items()},
            "webhooks": self.webhooks,
            "written": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        (self.directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def down(directory: Path, controlplane_dir: Path) -> list[str]:
    """Stop the controllers `start(detach=True)` left running in `directory`, their webhook
    configurations deleted first while the control plane of `controlplane_dir` still runs."""
    directory = directory.resolve()
    path = directory / STATE_FILE
    if not path.exists():
        return []
    state = json.loads(path.read_text())
    server = controlplane_dir / controlplane.STATE_FILE
    if server.exists():
        cluster = ControlPlane(controlplane_dir)
        parsed = urllib.parse.urlsplit(json.loads(server.read_text())["url"])
        cluster.address, cluster.port = parsed.hostname or "", parsed.port or 0
        for kind, name in state["webhooks"]:
            with contextlib.suppress(OSError, HarnessError):
                cluster.request("DELETE", f"{_WEBHOOK_PATHS[kind]}/{name}")
    stopped = []
    for name in PROGRAMS:
        pid = state["pids"].get(name)
        if pid is not None and _ours(pid, name, directory):
            controlplane._terminate(pid)
            stopped.append(name)
    path.unlink()
    return stopped


def _ours(pid: int, name: str, directory: Path) -> bool:
    """Whether `pid` still runs a program started for `directory` (its command line names a
    file there; not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return str(directory) in command and name.split("-")[0] in command
