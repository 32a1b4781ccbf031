"""What secureml adds to a pipeline run through Argo on a real node, as a ratio in one run
(docs/performance.md).

On the end-to-end environment of tests/e2e (tests/e2e/environment.py: a control plane, a real
node, Argo's own workflow-controller v4.0.5, the tenant bundle of a team-a-dev derived profile with
the platform runtime injected), the reference pipeline (pipelines/secure_finetune.py: prep, train
on a MIG slice, evaluate on a time-sliced share of the fake GPU) as the Workflow KFP 2.17's API
server would submit (tests/harness/kfp_workflow.py), from its creation to the Workflow's
Succeeded (tests/e2e/argo_run.py):

- secure: in the tenant's namespace, under the bundle (its mutating policy injects the runtime,
  its validating policies judge every pod), each step under secureml's launcher (identity, scrubs
  before and after on the fake GPU, the shim on the time-sliced step, the audit record);
- bare: the same Workflow in a namespace without the bundle, each step's command without
  secureml's launcher in front (the same drivers, KFP launcher stand-in, Argo executor, images
  and GPU requests).

Alternated, `ARGO_BENCH_RUNS` of each (default 2) after one unmeasured run of each (image
pulls); medians and their ratio (target: at most 1.10x). Also each step pod's own time (its
creation to its last container's end), summed over the three steps.

Needs root, Go, buildah and `make deps` (as tests/e2e); elsewhere it says what is missing and
exits 0 (benchmarks are never a pass/fail of the suite).

    .venv/bin/python benchmarks/argo_overhead.py
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from secureml.bundle.common import BundleOptions  # noqa: E402
from secureml.bundle.rbac import render_role, render_role_binding  # noqa: E402
from secureml.core import contract  # noqa: E402
from secureml.images.context import cache_dir  # noqa: E402
from tests.e2e import steps  # noqa: E402
from tests.e2e.argo_run import ArgoRun, run_reference  # noqa: E402
from tests.e2e.environment import E2E, STORE_PORT, requirements, running_e2e  # noqa: E402
from tests.harness.controlplane import HarnessError  # noqa: E402
from tests.support.docker_registry import running_registry  # noqa: E402

RUNS = int(os.environ.get("ARGO_BENCH_RUNS", "2"))
BARE_NAMESPACE = "bare"


def _bare_steps(workflow: dict[str, Any], patches: dict[str, str]) -> None:
    """Each step's command without secureml's launcher in front."""
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
    for task, text in patches.items():
        patch = json.loads(text)
        main = next(c for c in patch["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
        assert main["args"][: len(prefix)] == prefix, main["args"][:4]
        main["args"] = main["args"][len(prefix) :]
        patches[task] = json.dumps(patch)


def _bare_namespace(e2e: E2E) -> None:
    """A namespace without the bundle: the runner, its Role (Argo's executor reports results,
    the stand-ins read the `kfp-launcher` ConfigMap) and that ConfigMap."""
    cluster = e2e.cluster
    cluster.create_namespace(BARE_NAMESPACE, {"pod-security.kubernetes.io/enforce": "restricted"})
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
        assert status == 201, answer
    status, answer = cluster.request(
        "POST",
        f"/api/v1/namespaces/{BARE_NAMESPACE}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kfp-launcher"},
            "data": {"standinStore": f"http://{e2e.network.address}:{STORE_PORT}"},
        },
    )
    assert status == 201, answer


def _step_seconds(run: ArgoRun) -> float:
    """Each step pod's creation to its last container's end, summed."""
    total = 0.0
    for pod in run.steps.values():
        created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
        ends = [
            datetime.datetime.fromisoformat(s["state"]["terminated"]["finishedAt"])
            for s in pod["status"]["containerStatuses"]
        ]
        total += (max(ends) - created).total_seconds()
    return total


def _run(e2e: E2E, docs: list[dict[str, Any]], name: str, *, bare: bool) -> ArgoRun:
    run = run_reference(
        e2e,
        docs,
        name=name,
        namespace=BARE_NAMESPACE if bare else None,
        alter=_bare_steps if bare else None,
        logs=False,
    )
    assert run.phase == "Succeeded", run.explain()
    return run


def measure(e2e: E2E, folder: Path) -> None:
    _bare_namespace(e2e)
    docs = steps.compile_reference(e2e.step_image, e2e.profile_path, folder)
    _run(e2e, docs, "warm-secure", bare=False)
    _run(e2e, docs, "warm-bare", bare=True)
    secure: list[ArgoRun] = []
    bare: list[ArgoRun] = []
    for index in range(RUNS):
        secure.append(_run(e2e, docs, f"secure-{index}", bare=False))
        bare.append(_run(e2e, docs, f"bare-{index}", bare=True))
    secure_s = statistics.median(r.seconds for r in secure)
    bare_s = statistics.median(r.seconds for r in bare)
    secure_steps = statistics.median(_step_seconds(r) for r in secure)
    bare_steps = statistics.median(_step_seconds(r) for r in bare)
    print(f"load average {os.getloadavg()[0]:.1f} (1 min), 2 cores shared")
    print(
        f"the reference pipeline through Argo, create to Succeeded (median of {RUNS}): "
        f"secure {secure_s:.1f} s, bare {bare_s:.1f} s: ratio {secure_s / bare_s:.2f}x "
        f"(target <= 1.10x), {secure_s - bare_s:+.1f} s"
    )
    print(
        f"  secure {[round(r.seconds, 1) for r in secure]}, bare {[round(r.seconds, 1) for r in bare]}"
    )
    print(
        f"  the three step pods' own time, summed: secure {secure_steps:.1f} s, bare "
        f"{bare_steps:.1f} s: {secure_steps - bare_steps:+.1f} s, ratio {secure_steps / bare_steps:.2f}x"
    )


def main() -> int:
    try:
        requirements()
    except HarnessError as error:
        print(f"skipped: {error}")
        return 0
    from tests.support.step_images import build_images

    with tempfile.TemporaryDirectory(prefix="argo-bench-") as scratch:
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
