"""Step pods of the reference pipeline, made to order for the tests that try the node's controls
(test_identity_real.py, test_faults_real.py, test_hostile_image.py): a previewed pod renamed, its
step (what follows the injected launcher, the part the tenant writes) replaced by a probe, run on
the node, its `main` log and audit record read back."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secureml.core import contract
from tests.e2e import steps
from tests.e2e.environment import E2E, ArtifactStore
from tests.support import node_pods
from tests.support.admission import PIPELINE_RUNNER

# The node's pool each step's placement asks for (test_steps_run.py's POOLS).
POOLS: dict[str, dict[str, str]] = {
    "prep": {},
    "train": {},
    "evaluate": {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
}

# What prep and train would have written (the steps' inputs), for a step run on its own.
INPUTS = {"dataset": b"[[0.0, 1.0], [1.0, 3.0]]", "model": b'{"w": 2.0, "b": 1.0}'}


@dataclass(frozen=True)
class Compiled:
    store: ArtifactStore
    docs: list[dict[str, Any]]
    submitted: dict[str, dict[str, Any]]  # as Argo submits them (the server's MAP mutates them)
    stored: dict[str, dict[str, Any]]  # as the server stores them (the MAP applied)

    def pod(self, step: str, name: str, *, mutated: bool = False) -> dict[str, Any]:
        """The step's pod with KFP's run-time values filled in, named `name` (its inputs are put
        in the run's store first: the launcher stand-in downloads them before the step)."""
        pod = (self.stored if mutated else self.submitted)[step]
        values = steps.run_values(self.docs, pod, step, execution=list(POOLS).index(step) + 1)
        inputs = steps.executor_input(step, pod["metadata"]["labels"]["pipeline/runid"])["inputs"]
        for entry in inputs.get("artifacts", {}).values():
            for artifact in entry["artifacts"]:
                key = artifact["uri"].removeprefix("minio://")
                self.store.objects.setdefault(key, INPUTS[artifact["name"]])
        return steps.as_run(pod, values, name=name)


def compile_pods(e2e: E2E, folder: Path) -> Compiled:
    docs = steps.compile_reference(e2e.step_image, e2e.profile_path, folder)
    return Compiled(
        e2e.store,
        docs,
        steps.previewed(docs, e2e.profile, mutate=False),
        steps.previewed(docs, e2e.profile),
    )


def main_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)


def with_step(pod: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The pod with its step replaced by `argv`, still behind the injected launcher."""
    main = main_container(pod)
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
    assert main["args"][: len(prefix)] == prefix, main["args"][:4]
    main["args"] = [*prefix, *argv]
    return pod


@dataclass(frozen=True)
class Ran:
    pod: dict[str, Any]
    log: str  # main's
    seconds: float

    @property
    def main_exit_code(self) -> int | None:
        state = steps.container_states(self.pod).get(contract.KFP_MAIN_CONTAINER) or {}
        code = state.get("exitCode")
        return None if code is None else int(code)

    def record(self) -> dict[str, Any]:
        return steps.audit_record(self.log)

    def stages(self) -> dict[str, dict[str, Any]]:
        return {stage["name"]: stage for stage in self.record()["stages"]}

    def lines(self, prefix: str) -> list[Any]:
        """The JSON after `prefix` on each line of main's log that starts with it."""
        return [
            json.loads(ln[len(prefix) :]) for ln in self.log.splitlines() if ln.startswith(prefix)
        ]

    def explain(self) -> str:
        return json.dumps(
            {"states": steps.container_states(self.pod), "main": self.log[-4000:]}, indent=1
        )


def create(e2e: E2E, pod: dict[str, Any], namespace: str | None = None) -> None:
    """Create `pod` as KFP's Argo controller does (the one creator of step pods that
    `secureml.pipelineIdentity` admits)."""
    namespace = namespace or e2e.namespace
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", pod, as_user=PIPELINE_RUNNER
    )
    assert status == 201, f"creating {pod['metadata']['name']}: HTTP {status}: {answer}"


def finish(
    e2e: E2E, name: str, started: float, namespace: str | None = None, timeout_s: float = 240.0
) -> Ran:
    namespace = namespace or e2e.namespace
    done = node_pods.wait_for_end(e2e.cluster, namespace, name, timeout_s=timeout_s)
    seconds = time.monotonic() - started
    try:
        log = node_pods.log(e2e.cluster, namespace, name, contract.KFP_MAIN_CONTAINER)
    except AssertionError as error:
        log = f"<no log: {error}>"
    return Ran(done, log, seconds)


def run(e2e: E2E, pod: dict[str, Any], step: str, namespace: str | None = None) -> Ran:
    """Put the node in `step`'s pool, create the pod, wait for its end."""
    e2e.pool(POOLS[step])
    started = time.monotonic()
    create(e2e, pod, namespace)
    return finish(e2e, pod["metadata"]["name"], started, namespace)


def wait_for_line(e2e: E2E, name: str, text: str, timeout_s: float = 180.0) -> None:
    """Wait until main's log of pod `name` has a line starting with `text`."""
    deadline = time.monotonic() + timeout_s
    log = ""
    while time.monotonic() < deadline:
        status, pod = e2e.cluster.request("GET", f"/api/v1/namespaces/{e2e.namespace}/pods/{name}")
        assert status == 200, pod
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            break
        running = {
            s["name"]
            for s in pod["status"].get("containerStatuses") or []
            if "running" in (s.get("state") or {})
        }
        if contract.KFP_MAIN_CONTAINER in running:
            log = node_pods.log(e2e.cluster, e2e.namespace, name, contract.KFP_MAIN_CONTAINER)
            if any(line.startswith(text) for line in log.splitlines()):
                return
        time.sleep(0.2)
    raise AssertionError(f"{name}: no line {text!r} in main's log: {log[-3000:]}")


def launcher_pid(pod_uid: str) -> int:
    """The host pid of the injected launcher of the pod with `pod_uid` (its interpreter runs
    `secureml.enforcement.launch`, in a cgroup of that pod)."""
    found = []
    cgroup_uid = pod_uid.replace("-", "_")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        if argv[:4] == [
            contract.RUNTIME_PYTHON.encode(),
            b"-I",
            b"-m",
            b"secureml.enforcement.launch",
        ] and (pod_uid in cgroup or cgroup_uid in cgroup):
            found.append(int(entry.name))
    assert len(found) == 1, f"launchers of pod {pod_uid}: {found}"
    return found[0]
