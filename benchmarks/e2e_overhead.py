"""What a secure step costs on a real node, as ratios measured in one run (docs/performance.md).

On the end-to-end environment of tests/e2e (a control plane, a real node, the tenant bundle of a
team-a-dev derived profile with the platform runtime injected; tests/e2e/environment.py):

1. Step pod wall time: the reference pipeline's `prep` pod exactly as `secureml compile` previews
   it (Argo's init/wait/emissary, the kfp-launcher stand-in, the injected runtime init container,
   secureml's launcher) from create to Succeeded, against a bare pod on the same node running the
   same command in the same image (hardened, one container, no bundle in its namespace), and
   against the same KFP pod without secureml (Argo's and KFP's containers, no runtime injection,
   no launcher: what KFP itself costs). Alternated, `E2E_BENCH_PODS` each (default 3); medians.
   Target: at most +1 s.
2. Admission latency: `E2E_BENCH_N` (default 1000) dry-run creates of that pod into the tenant's
   namespace (MAP, both VAPs, PodSecurity, quota) against the same pod into a namespace without
   the bundle, alternated on one kept-alive connection each. Targets: at most +5 ms p50, +20 ms p99.

Needs root, Go, buildah and `make deps` (as tests/e2e); elsewhere it says what is missing and
exits 0 (benchmarks are never a pass/fail of the suite).

    .venv/bin/python benchmarks/e2e_overhead.py
"""

from __future__ import annotations

import copy
import datetime
import fcntl
import http.client
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from secureml.bundle.common import BundleOptions  # noqa: E402
from secureml.bundle.rbac import render_role, render_role_binding  # noqa: E402
from secureml.core import contract  # noqa: E402
from secureml.images.context import cache_dir  # noqa: E402
from tests.e2e import steps  # noqa: E402
from tests.e2e.environment import E2E, requirements, running_e2e  # noqa: E402
from tests.harness.controlplane import ControlPlane, HarnessError  # noqa: E402
from tests.support import node_pods  # noqa: E402
from tests.support.admission import PIPELINE_RUNNER  # noqa: E402
from tests.support.docker_registry import running_registry  # noqa: E402

PODS = int(os.environ.get("E2E_BENCH_PODS", "3"))
N = int(os.environ.get("E2E_BENCH_N", "1000"))
BARE_NAMESPACE = "bare"


def _bare_pod(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The step's own command (after the launcher) in the step image, hardened, nothing else."""
    main = next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    args = list(main["args"])
    command = args[args.index("--") + 1 :]
    executor_input = main["command"][main["command"].index("--executor_input") + 1]
    command = [executor_input if arg == "{{$}}" else arg for arg in command]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "affinity": pod["spec"].get("affinity"),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": main["image"],
                    "command": command,
                    "securityContext": main["securityContext"],
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "minio", "mountPath": "/minio"},
                    ],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "minio", "emptyDir": {}}],
        },
    }


LAST: dict[str, Any] = {}  # the last pod that ran, for where its time went


def _phases(pod: dict[str, Any]) -> str:
    """Each container's start and end, seconds after the pod's creation (the API's timestamps
    have one-second resolution)."""
    created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    parts = []
    statuses = [
        *pod["status"].get("initContainerStatuses", []),
        *pod["status"]["containerStatuses"],
    ]
    for status in statuses:
        ended = status["state"].get("terminated", {})
        if ended:
            start = datetime.datetime.fromisoformat(ended["startedAt"]) - created
            end = datetime.datetime.fromisoformat(ended["finishedAt"]) - created
            parts.append(f"{status['name']} {start.seconds}-{end.seconds}")
    return ", ".join(parts)


def _kfp_pod(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """The KFP pod without secureml: as Argo submits it, main's launcher prefix taken out (no
    bundle in its namespace, so no runtime injection either)."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = BARE_NAMESPACE
    main = next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
    assert main["args"][: len(prefix)] == prefix, main["args"][:3]
    main["args"] = main["args"][len(prefix) :]
    return pod


def _run(cluster: ControlPlane, namespace: str, pod: dict[str, Any]) -> float:
    started = time.monotonic()
    status, answer = cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", pod, as_user=PIPELINE_RUNNER
    )
    assert status == 201, answer
    done = node_pods.wait_for_end(cluster, namespace, pod["metadata"]["name"], timeout_s=240.0)
    seconds = time.monotonic() - started
    assert done["status"]["phase"] == "Succeeded", done["status"]
    LAST[namespace] = done
    cluster.request(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
    )
    return seconds


class _Connection:
    """One kept-alive admin connection: a request's latency without a TLS handshake."""

    def __init__(self, cluster: ControlPlane) -> None:
        pki = cluster.directory / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.connection = http.client.HTTPSConnection(
            cluster.address, cluster.port, context=context
        )

    def dry_run(self, namespace: str, body: bytes) -> float:
        started = time.perf_counter()
        self.connection.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods?dryRun=All",
            body=body,
            # as the pipeline runner (secureml.pipelineIdentity), in both arms alike
            headers={
                "Content-Type": "application/json",
                "Impersonate-User": PIPELINE_RUNNER,
                "Impersonate-Group": "system:masters",
            },
        )
        response = self.connection.getresponse()
        answer = response.read()
        seconds = time.perf_counter() - started
        assert response.status == 201, answer[:500]
        return seconds


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(e2e: E2E, folder: Path) -> None:
    cluster = e2e.cluster
    e2e.cluster.create_namespace(
        BARE_NAMESPACE, {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    status, answer = cluster.request(
        "POST",
        f"/api/v1/namespaces/{BARE_NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": contract.RUNNER_NAME}},
    )
    assert status in (201, 409), answer
    for manifest in (*render_role(e2e.profile, BundleOptions()),
                     *render_role_binding(e2e.profile, BundleOptions())):  # fmt: skip
        manifest["metadata"] = {"name": contract.RUNNER_NAME}
        for subject in manifest.get("subjects", []):
            subject["namespace"] = BARE_NAMESPACE
        kind = "roles" if manifest["kind"] == "Role" else "rolebindings"
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{BARE_NAMESPACE}/{kind}"
        status, answer = cluster.request("POST", path, manifest)
        assert status == 201, answer  # Argo's wait reports the step's result
    docs = steps.compile_reference(e2e.step_image, e2e.profile_path, folder)
    preview = steps.previewed(docs, e2e.profile, mutate=False)["prep"]
    values = steps.run_values(docs, preview, "prep", execution=1)
    step_pod = steps.as_run(preview, values)
    e2e.pool({})

    # 1. wall time; one of each first, unmeasured, to pull the images
    _run(cluster, e2e.namespace, steps.as_run(preview, values, name="warm-step"))
    _run(cluster, BARE_NAMESPACE, _bare_pod(step_pod, "warm-bare"))
    _run(cluster, BARE_NAMESPACE, _kfp_pod(step_pod, "warm-kfp"))
    secure, bare, kfp = [], [], []
    phases: dict[str, str] = {}
    for index in range(PODS):
        secure.append(_run(cluster, e2e.namespace, steps.as_run(preview, values, f"step-{index}")))
        phases["secure"] = _phases(LAST[e2e.namespace])
        bare.append(_run(cluster, BARE_NAMESPACE, _bare_pod(step_pod, f"bare-{index}")))
        phases["bare"] = _phases(LAST[BARE_NAMESPACE])
        kfp.append(_run(cluster, BARE_NAMESPACE, _kfp_pod(step_pod, f"kfp-{index}")))
        phases["kfp"] = _phases(LAST[BARE_NAMESPACE])
    step_s, bare_s, kfp_s = (statistics.median(x) for x in (secure, bare, kfp))

    # 2. admission latency, alternated
    with_bundle, without = _Connection(cluster), _Connection(cluster)
    body = copy.deepcopy(step_pod)
    body["metadata"] = {"generateName": "dry-", "labels": step_pod["metadata"]["labels"],
                        "annotations": step_pod["metadata"]["annotations"]}  # fmt: skip
    raw = json.dumps(body).encode()
    for _ in range(20):  # warm both paths (policy compilation, connections)
        with_bundle.dry_run(e2e.namespace, raw)
        without.dry_run(BARE_NAMESPACE, raw)
    bundled, plain = [], []
    for _ in range(N):
        bundled.append(with_bundle.dry_run(e2e.namespace, raw))
        plain.append(without.dry_run(BARE_NAMESPACE, raw))
    p50 = (statistics.median(bundled), statistics.median(plain))
    p99 = (_percentile(bundled, 0.99), _percentile(plain, 0.99))

    print(f"load average {os.getloadavg()[0]:.1f} (1 min), 2 cores shared")
    print(f"step pod to Succeeded (median of {PODS}): secure {step_s:.2f} s, bare {bare_s:.2f} s")
    print(
        f"  added {step_s - bare_s:+.2f} s (target <= +1 s), ratio {step_s / bare_s:.2f}x; "
        f"secure {[round(s, 2) for s in secure]}, bare {[round(s, 2) for s in bare]}"
    )
    print(
        f"  against the KFP pod without secureml ({kfp_s:.2f} s): {step_s - kfp_s:+.2f} s, ratio "
        f"{step_s / kfp_s:.2f}x (KFP's and Argo's own containers: {kfp_s - bare_s:+.2f} s); "
        f"kfp {[round(s, 2) for s in kfp]}"
    )
    for kind, where in phases.items():
        print(f"  {kind}: containers' start-end, s after create: {where}")
    print(f"admission, {N} dry-run creates each: with the bundle vs without")
    print(
        f"  p50 {p50[0] * 1e3:.1f} ms vs {p50[1] * 1e3:.1f} ms: {(p50[0] - p50[1]) * 1e3:+.1f} ms "
        f"(target <= +5 ms), ratio {p50[0] / p50[1]:.2f}x"
    )
    print(
        f"  p99 {p99[0] * 1e3:.1f} ms vs {p99[1] * 1e3:.1f} ms: {(p99[0] - p99[1]) * 1e3:+.1f} ms "
        f"(target <= +20 ms), ratio {p99[0] / p99[1]:.2f}x"
    )


def main() -> int:
    try:
        requirements()
    except HarnessError as error:
        print(f"skipped: {error}")
        return 0
    from tests.support.step_images import build_images

    with tempfile.TemporaryDirectory(prefix="e2e-bench-") as scratch:
        folder = Path(scratch)
        (folder / "registry").mkdir()
        with running_registry(folder / "registry") as registry:
            cache_dir().mkdir(parents=True, exist_ok=True)
            with (cache_dir() / "build.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                images = build_images(registry)
            (folder / "profile").mkdir()
            with running_e2e(
                registry, images.step.reference, images.runtime.reference, folder / "profile"
            ) as e2e:
                (folder / "compile").mkdir()
                measure(e2e, folder / "compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
