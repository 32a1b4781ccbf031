"""The end-to-end environment (the `e2e` fixture, benchmarks/e2e_overhead.py): compiled step pods run on a real node under the tenant's real admission.

Session-scoped, one per test process. It starts, on a node slot of its own
(tests/harness/node.py):

- a control plane bound to the slot's address, with the real CRDs, and Argo's
  `WorkflowTaskResult` CRD from Argo's own module (Argo's `wait` container reports each step's
  outputs in one; read from the Go module cache, nothing of Argo is kept in the repository);
- a node as a general pool (no pool label, no taint: the reference pipeline's CPU step keeps off
  the dedicated and time-sliced pools by node affinity, and each GPU step's pool label is put on
  the node for its own test, `E2E.pool`), with the fake NVIDIA GPU's resources advertised by our
  device plugin (tests/harness/fake_gpu_plugin.py: `GPU_RESOURCES`, one MIG 1g.10gb instance and
  one time-sliced share, the driver's libraries mounted as the NVIDIA toolkit mounts them);
- the kubelet's cluster DNS address `CLUSTER_DNS_IP` (tests/harness/cluster_dns.py: the trainer
  tests start the DNS stand-in behind it; until then pods have a resolver that answers nothing);
- the `kubernetes` Service routed to the API server (tests/harness/kubernetes_service.py: Argo's
  executor and the launcher stand-in are in-cluster clients);
- the session's registry (`docker_registry`) holding the platform runtime image and the step
  image (`built_images`, tests/support/step_images.py), and argoexec and the kfp-launcher STAND-IN
  under their upstream paths (tests/harness/kfp_images.py), which containerd reaches as the
  mirror of `quay.io` and `ghcr.io`: pods name KFP's and Argo's images exactly as the preview
  does;
- Argo's own workflow-controller (tests/harness/argo.py: Argo's CRDs, RBAC and the executor KFP
  installs), so that tests submit Workflows and Argo creates the pods;
- the run's object store: a plain HTTP store on the slot's address that the launcher stand-in
  downloads inputs from and uploads outputs to (`standinStore` in the tenant's `kfp-launcher`
  ConfigMap), so each step reads what the one before it wrote.

The tenant is `PROFILE_BASE` (examples/profiles/team-a-dev.yaml: signatures not required, the dev
profile) named team-a, with its allowed registry and `runtime.image` pointed at the session's
registry, so the bundle's MutatingAdmissionPolicy injects the platform runtime, and
`IDENTITY_REQUIRED`: the node runs SPIRE (k8s_psat, the `k8s` workload attestor), the SPIFFE CSI
driver and spire-controller-manager (tests/harness/node_identity.py, started by `Node`), the
tenant's rendered ClusterSPIFFEID is applied with its bundle, so the MAP mounts the CSI socket and
each step's launcher requires and checks its SVID.

Where the node cannot run here (no root, Go, a Debian package, buildah) it skips saying why,
except under CI=true, where it fails; a start failure once everything is there fails everywhere.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from secureml.gpu.request import MIG, TimeSlice
from secureml.profile.model import TenantProfile, load_profile
from tests.harness import controlplane, kfp_images
from tests.harness import node as node_harness
from tests.harness.argo import WorkflowController
from tests.harness.cluster_dns import CLUSTER_DNS_IP
from tests.harness.controlplane import ControlPlane, HarnessError
from tests.harness.fake_gpu_plugin import FakeGpuPlugins
from tests.harness.go_modules import module_dir
from tests.harness.kubernetes_service import ServiceRoute
from tests.harness.node import Node, NodeNetwork
from tests.harness.node import _request as node_request
from tests.support.admission import install_tenant

REPO = Path(__file__).resolve().parents[2]
PROFILE_BASE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
IDENTITY_REQUIRED = True  # SPIRE's agent and the SPIFFE CSI driver run on the node
ARGO_MODULE = "github.com/argoproj/argo-workflows/v4@v4.0.5"
ARGO_TASK_RESULT_CRD = "manifests/base/crds/minimal/argoproj.io_workflowtaskresults.yaml"
# The GPUs on the node (tests/harness/fake_gpu_plugin.py): one device of each resource the
# reference pipeline's GPU steps request, a fake machine holding exactly that request.
GPU_RESOURCES = {
    "nvidia.com/mig-1g.10gb": MIG("1g.10gb"),
    "nvidia.com/gpu.shared": TimeSlice(memory="8Gi", compute=25),
}
STORE_PORT = 443  # inside the example profiles' egress allowlist (10.0.0.0/8, port 443)


class ArtifactStore(ThreadingHTTPServer):
    """The run's object store for the launcher stand-in: GET and PUT of keys, in memory."""

    def __init__(self, address: str) -> None:
        self.objects: dict[str, bytes] = {}
        super().__init__((address, STORE_PORT), _StoreHandler)


class _StoreHandler(BaseHTTPRequestHandler):
    server: ArtifactStore

    def do_GET(self) -> None:
        data = self.server.objects.get(self.path.lstrip("/"))
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.server.objects[self.path.lstrip("/")] = self.rfile.read(length)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class E2E:
    cluster: ControlPlane
    node: Node
    network: NodeNetwork
    registry: str
    profile: TenantProfile
    profile_path: Path
    step_image: str
    runtime_image: str
    store: ArtifactStore
    argo: WorkflowController
    pools: dict[str, str] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.profile.spec.namespace

    def patch(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A JSON merge patch as the admin."""
        pki = self.cluster.directory / "pki"
        return node_request(
            self.cluster, "PATCH", path, body, (pki / "admin.crt", pki / "admin.key")
        )

    def pool(self, labels: dict[str, str]) -> None:
        """Put exactly `labels` (of the GPU pools' keys) on the node, as the admin."""
        current = dict.fromkeys(self.pools, None)
        status, answer = self.patch(
            f"/api/v1/nodes/{self.node.name}", {"metadata": {"labels": {**current, **labels}}}
        )
        assert status == 200, answer
        self.pools = dict(labels)


def _profile(folder: Path, registry: str, runtime_image: str) -> Path:
    spec = yaml.safe_load(PROFILE_BASE.read_text())
    spec["metadata"]["name"] = "team-a"
    spec["spec"]["images"]["allowedRegistries"] = [f"{registry}/"]
    spec["spec"]["images"]["signatures"]["required"] = False
    spec["spec"]["runtime"]["image"] = runtime_image
    spec["spec"]["identity"]["required"] = IDENTITY_REQUIRED
    path = folder / "team-a.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _argo_crd() -> dict[str, Any]:
    folder = module_dir(ARGO_MODULE)
    return dict(yaml.safe_load((folder / ARGO_TASK_RESULT_CRD).read_text()))


@contextlib.contextmanager
def running_e2e(registry: str, step_image: str, runtime_image: str, folder: Path) -> Iterator[E2E]:
    """The whole environment (see the module's docstring), for `e2e` and benchmarks/."""
    crd = _argo_crd()
    kfp_images.push_kfp_images(registry)
    path = _profile(folder, registry, runtime_image)
    profile = load_profile(path)
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(NodeNetwork())
        cluster = stack.enter_context(ControlPlane(address=network.address))
        node = stack.enter_context(
            Node(cluster, network, labels={}, taints=(), cluster_dns=CLUSTER_DNS_IP)
        )
        node.allow_registry(registry)
        plugins = stack.enter_context(
            FakeGpuPlugins(node, folder / "gpu", kfp_images.binaries() / "fake-device-plugin")
        )
        for resource, request in GPU_RESOURCES.items():
            plugins.add(resource, request)
        kfp_images.mirror_kfp_registries(node, registry)
        status, answer = cluster.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
        )
        if status not in (201, 409):
            raise HarnessError(f"creating Argo's WorkflowTaskResult CRD: HTTP {status}: {answer}")
        stack.enter_context(ServiceRoute(network, cluster))
        install_tenant(cluster, profile)
        argo = stack.enter_context(WorkflowController(cluster, folder / "argo"))
        store = ArtifactStore(network.address)
        threading.Thread(target=store.serve_forever, daemon=True).start()
        stack.callback(store.server_close)
        stack.callback(store.shutdown)
        status, answer = cluster.request(
            "POST",
            f"/api/v1/namespaces/{profile.spec.namespace}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kfp-launcher"},
                "data": {"standinStore": f"http://{network.address}:{STORE_PORT}"},
            },
        )
        if status != 201:
            raise HarnessError(f"creating the kfp-launcher ConfigMap: HTTP {status}: {answer}")
        yield E2E(
            cluster=cluster,
            node=node,
            network=network,
            registry=registry,
            profile=profile,
            profile_path=path,
            step_image=step_image,
            runtime_image=runtime_image,
            store=store,
            argo=argo,
        )


def requirements() -> None:
    """Raise HarnessError naming what this machine lacks (building what is missing)."""
    missing = node_harness.missing_requirements()
    if missing:
        raise HarnessError("the test node needs " + "; ".join(missing))
    controlplane.binaries()
    node_harness.binaries()
    kfp_images.binaries()
    _argo_crd()
