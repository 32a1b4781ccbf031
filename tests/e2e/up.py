"""`make cluster-up`'s end-to-end part: what tests/e2e runs, added to the control plane and node
that `python -m tests.harness.node up` left running (docs/testing.md, "By hand").

    python -m tests.e2e.up [--dir .cluster]        # after `tests.harness.node up`
    python -m tests.e2e.up down [--dir .cluster]   # before `tests.harness.node down`

`up` pushes the platform runtime image and the step image (built as tests/images builds them)
and Argo's and KFP's images (tests/harness/kfp_images.py) to the node's registry, makes the
node's containerd pull `quay.io` and `ghcr.io` from it, installs Argo's WorkflowTaskResult CRD,
and starts one supervisor process, in its own session, that holds what has no process of its own
on the node: the fake GPU's device plugins (tests/harness/fake_gpu_plugin.py, the resources of
`environment.GPU_RESOURCES`), the `kubernetes` Service's route (tests/harness/kubernetes_service.py)
and the run's object store. It takes the node's pool label and taint off (a general pool, as
the e2e node is: `kubectl label node` puts a GPU step's pool on it). Then it installs the tenant team-a as tests/e2e does (the dev
profile with identity required, its registry and `runtime.image` the node's: `<dir>/team-a.yaml`)
and the `kfp-launcher` ConfigMap naming the store. `down` stops the supervisor (it takes its
plugins and route with it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from secureml.profile.model import load_profile
from tests.e2e import environment
from tests.harness import kfp_images
from tests.harness.controlplane import ControlPlane, HarnessError, _terminate
from tests.harness.fake_gpu_plugin import FakeGpuPlugins
from tests.harness.kubernetes_service import ServiceRoute
from tests.harness.node import LABELS, STATE_FILE, Node, NodeNetwork
from tests.harness.node import _request as node_request
from tests.support.admission import install_tenant

ROOT = Path(__file__).resolve().parents[2]
STATE = "e2e.json"


def _cluster(directory: Path) -> ControlPlane:
    """The running control plane of `directory` (its state file names its address)."""
    from urllib.parse import urlsplit

    cluster = ControlPlane(directory)
    url = urlsplit(json.loads((directory / "controlplane.json").read_text())["url"])
    cluster.address, cluster.port = url.hostname or "", url.port or 0
    return cluster


def _node(directory: Path, cluster: ControlPlane) -> tuple[Node, dict[str, Any]]:
    state = json.loads((directory / "node" / STATE_FILE).read_text())
    network = NodeNetwork(int(state["slot"]))
    network.slot = int(state["slot"])  # taken by `tests.harness.node up`: not entered again
    return Node(cluster, network, directory / "node", name=state["name"]), state


def _serve(directory: Path) -> int:
    """The supervisor: the fake GPU's plugins, the Service route, the store, until SIGTERM."""
    cluster = _cluster(directory)
    node, _ = _node(directory, cluster)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with contextlib.ExitStack() as stack:
        plugins = stack.enter_context(
            FakeGpuPlugins(
                node, directory / "e2e" / "gpu", kfp_images.binaries() / "fake-device-plugin"
            )
        )
        for resource, request in environment.GPU_RESOURCES.items():
            plugins.add(resource, request)
        stack.enter_context(ServiceRoute(node.network, cluster))
        store = environment.ArtifactStore(node.network.address)
        threading.Thread(target=store.serve_forever, daemon=True).start()
        stack.callback(store.server_close)
        stack.callback(store.shutdown)
        (directory / "e2e" / "ready").write_text(
            f"http://{node.network.address}:{environment.STORE_PORT}\n"
        )
        stopping.wait()
    return 0


def _up(directory: Path) -> int:
    _down(directory)
    cluster = _cluster(directory)
    node, state = _node(directory, cluster)
    folder = directory / "e2e"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ready").unlink(missing_ok=True)
    registry = state["registry"]
    # a general pool, as the e2e node (environment.py): the reference pipeline's CPU step keeps off
    # the dedicated pool; `kubectl label node` puts a GPU step's pool label on it by hand
    pki = cluster.directory / "pki"
    status, answer = node_request(
        cluster,
        "PATCH",
        f"/api/v1/nodes/{node.name}",
        {"metadata": {"labels": dict.fromkeys(LABELS)}, "spec": {"taints": None}},
        (pki / "admin.crt", pki / "admin.key"),
    )
    if status != 200:
        raise HarnessError(f"making {node.name} a general pool: HTTP {status}: {answer}")
    from tests.support.step_images import build_images

    built = build_images(registry)
    kfp_images.push_kfp_images(registry)
    kfp_images.mirror_kfp_registries(node, registry)
    status, answer = cluster.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", environment._argo_crd()
    )
    if status not in (201, 409):
        raise HarnessError(f"creating Argo's WorkflowTaskResult CRD: HTTP {status}: {answer}")
    log = (folder / "supervisor.log").open("wb")
    with log:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.up", "serve", "--dir", str(directory)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (directory / STATE).write_text(json.dumps({"pid": supervisor.pid}) + "\n")
    deadline = time.monotonic() + 120
    while not (folder / "ready").exists():
        if supervisor.poll() is not None or time.monotonic() > deadline:
            _down(directory)
            raise HarnessError(
                f"the e2e supervisor did not start:\n{(folder / 'supervisor.log').read_text()[-3000:]}"
            )
        time.sleep(0.2)
    store = (folder / "ready").read_text().strip()
    profile_path = environment._profile(directory, registry, built.runtime.reference)
    profile = load_profile(profile_path)
    install_tenant(cluster, profile)
    status, answer = cluster.request(
        "POST",
        f"/api/v1/namespaces/{profile.spec.namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kfp-launcher"},
            "data": {"standinStore": store},
        },
    )
    if status not in (201, 409):
        raise HarnessError(f"creating the kfp-launcher ConfigMap: HTTP {status}: {answer}")
    where = os.path.relpath(directory)
    print(f"e2e: step image {built.step.reference}")
    print(f"e2e: runtime image {built.runtime.reference}")
    print(
        f"e2e: GPUs {', '.join(environment.GPU_RESOURCES)} (fake, {where}/e2e/gpu); store {store}"
    )
    print(f"e2e: tenant team-a from {os.path.relpath(profile_path)} (identity required)")
    print(f"e2e: supervisor pid {supervisor.pid} (log {where}/e2e/supervisor.log)")
    return 0


def _down(directory: Path) -> list[str]:
    path = directory / STATE
    if not path.exists():
        return []
    pid = int(json.loads(path.read_text())["pid"])
    stopped = []
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"tests.e2e.up" in argv and b"serve" in argv:
            _terminate(pid)
            stopped.append("e2e supervisor")
    path.unlink()
    return stopped


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.up")
    parser.add_argument("action", nargs="?", default="up", choices=("up", "down", "serve"))
    parser.add_argument("--dir", type=Path, default=ROOT / ".cluster")
    args = parser.parse_args(argv)
    directory: Path = args.dir.resolve()
    try:
        if args.action == "serve":
            return _serve(directory)
        if args.action == "down":
            stopped = _down(directory)
            print(f"stopped {', '.join(stopped)}" if stopped else "no e2e supervisor running")
            return 0
        return _up(directory)
    except HarnessError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main())
