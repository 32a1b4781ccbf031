"""The in-step program of a trainer step: create the compiled TrainJob, wait, report, clean up."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from secureml.core import contract
from secureml.trainer.manifest import with_run

Manifest = dict[str, Any]

MODULE = "secureml.trainer.submit"
EXIT_FAILED = 1
EXIT_UNUSABLE = 2
EXIT_CANCELLED = 143
POLL_SECONDS = 5.0
NETWORK_POLICY_PREFIX = "secureml-trainjob-"
GROUP, VERSION = contract.TRAINER_API_VERSION.split("/")
PLURAL = "trainjobs"


def submit_command(trainjob: Manifest, command: Sequence[str]) -> list[str]:
    """The step's argv (behind the launcher) that submits `trainjob` with `command` on each node;
    KFP appends the component's arguments after it."""
    text = json.dumps(trainjob, sort_keys=True, separators=(",", ":"))
    return ["python3", "-m", MODULE, "--trainjob", text, "--", *command]


def trainjob_of(command: Sequence[str]) -> Manifest | None:
    """The TrainJob in a step's command written by `submit_command`, or None."""
    args = list(command)
    for at in range(len(args) - 4):
        if args[at : at + 4] == ["python3", "-m", MODULE, "--trainjob"]:
            job: Manifest = json.loads(args[at + 4])
            return job
    return None


def job_name(step: str, pod: str) -> str:
    """An RFC 1035 label unique per step pod: the step's name and a hash of the pod's."""
    base = re.sub(r"[^a-z0-9-]+", "-", step.lower()).strip("-")[:40].rstrip("-") or "step"
    if not base[0].isalpha():
        base = "t" + base
    return f"{base}-{hashlib.sha256(pod.encode()).hexdigest()[:10]}"


def network_policy(job: Manifest) -> Manifest:
    """The job's own NetworkPolicy: its pods reach each other on every port (the rendezvous and
    NCCL's ports), and nothing else is opened. Its shape is pinned by the bundle's admission
    policy (`secureml.trainer.rules.network_policy_validations`)."""
    name = job["metadata"]["name"]
    peers = {"matchLabels": {contract.LABEL_JOBSET_NAME: name}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NETWORK_POLICY_PREFIX + name,
            "namespace": job["metadata"]["namespace"],
            "labels": dict(job["metadata"].get("labels", {})),
        },
        "spec": {
            "podSelector": peers,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": peers}]}],
            "egress": [{"to": [{"podSelector": peers}]}],
        },
    }


def _say(text: str) -> None:
    print(f"secureml-trainer: {text}", file=sys.stderr, flush=True)


def _final_condition(job: Manifest) -> str | None:
    """`Complete` or `Failed` once the TrainJob's status says so, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return None


def run_cluster(
    job: Manifest,
    api_client: Any,
    *,
    poll_seconds: float = POLL_SECONDS,
    install_signals: bool = True,
) -> int:
    """Create `job` and its NetworkPolicy through `api_client` (a `kubernetes.client.ApiClient`),
    wait for its end, print the nodes' logs, delete it. Exit 0 when the job
    completed, 1 when it failed, 2 when it could not be created, 143 when cancelled."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(api_client)
    namespace = job["metadata"]["namespace"]
    name = job["metadata"]["name"]

    def delete() -> None:
        try:
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
            _say(f"deleted TrainJob {namespace}/{name}")
        except ApiException as err:
            if err.status != 404:
                _say(f"could not delete TrainJob {namespace}/{name}: {err.reason}")

    cancelled: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        cancelled.append(signum)

    previous = {}
    if install_signals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        return _create_and_wait(custom, api_client, job, cancelled, poll_seconds, delete)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _create_and_wait(
    custom: Any,
    api_client: Any,
    job: Manifest,
    cancelled: list[int],
    poll_seconds: float,
    delete: Callable[[], None],
) -> int:
    from kubernetes.client.rest import ApiException

    namespace = job["metadata"]["namespace"]
    name = job["metadata"]["name"]
    try:
        created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
    except ApiException as err:
        _say(f"the API server refused TrainJob {namespace}/{name}: {err.status} {err.reason}")
        _say(str(err.body or "")[:2000])
        return EXIT_UNUSABLE
    _say(f"created TrainJob {namespace}/{name} ({job['spec']['trainer']['numNodes']} node(s))")
    try:
        _own_network_policy(api_client, job, created)
        while not cancelled:
            current = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            final = _final_condition(current)
            if final is not None:
                _print_logs(api_client, namespace, name)
                _say(f"TrainJob {namespace}/{name}: {final}")
                return 0 if final == "Complete" else EXIT_FAILED
            time.sleep(poll_seconds)
        _say(f"cancelled (signal {cancelled[0]}): stopping TrainJob {namespace}/{name}")
        return EXIT_CANCELLED
    except ApiException as err:
        _say(f"TrainJob {namespace}/{name}: {err.status} {err.reason}")
        return EXIT_FAILED
    finally:
        delete()


def _own_network_policy(api_client: Any, job: Manifest, created: Manifest) -> None:
    from kubernetes import client

    policy = network_policy(job)
    policy["metadata"]["ownerReferences"] = [
        {
            "apiVersion": contract.TRAINER_API_VERSION,
            "kind": "TrainJob",
            "name": created["metadata"]["name"],
            "uid": created["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    client.NetworkingV1Api(api_client).create_namespaced_network_policy(
        job["metadata"]["namespace"], policy
    )


def _print_logs(api_client: Any, namespace: str, name: str) -> None:
    """Each node pod's log, prefixed with its completion index."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"{contract.LABEL_JOBSET_NAME}={name}"
    ).items
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        index = (pod.metadata.labels or {}).get(contract.LABEL_JOB_COMPLETION_INDEX, "?")
        try:
            text = core.read_namespaced_pod_log(
                pod.metadata.name, namespace, container=contract.TRAINER_NODE_CONTAINER
            )
        except ApiException as err:
            text = f"(no log: {err.reason})"
        for line in str(text).splitlines():
            print(f"[node {index}] {line}", flush=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_local(job: Manifest, *, environ: dict[str, str] | None = None) -> int:
    """The job's nodes as local processes under the launcher, node 0 the rendezvous on loopback
    (`PET_*` as Trainer's torch plugin sets them); exit 0 when every node exits 0."""
    trainer = job["spec"]["trainer"]
    nodes = int(trainer["numNodes"])
    command = list(trainer["command"])
    if command[: len(contract.RUNTIME_LAUNCHER_PREFIX)] == list(contract.RUNTIME_LAUNCHER_PREFIX):
        # no platform runtime here: this interpreter's launcher (`python3` on PATH may lack it)
        local_launcher = [sys.executable, *contract.LAUNCHER_PREFIX[1:]]
        command = [*local_launcher, *command[len(contract.RUNTIME_LAUNCHER_PREFIX) :]]
    base = dict(os.environ if environ is None else environ)
    # the node's launcher settings, but the Workload API socket of this machine (the local run's)
    local = {name: base[name] for name in (contract.SPIFFE_SOCKET_ENV,) if name in base}
    base.update({e["name"]: e["value"] for e in trainer.get("env", []) if "value" in e})
    base.update(local)
    port = str(_free_port())
    children: list[subprocess.Popen[bytes]] = []
    for index in range(nodes):
        env = {
            **base,
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": port,
            contract.ENV_TRAINER_NODE: str(index),
        }
        children.append(subprocess.Popen(command, env=env))
    _say(f"started {nodes} local node(s), rendezvous 127.0.0.1:{port}")

    def stop(signum: int, _frame: FrameType | None) -> None:
        for child in children:
            child.terminate()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        codes = [child.wait() for child in children]
    finally:
        signal.signal(signal.SIGTERM, previous)
    for index, code in enumerate(codes):
        _say(f"node {index} exited {code}")
    return 0 if all(code == 0 for code in codes) else EXIT_FAILED


def _api_client() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def main(argv: Sequence[str] | None = None, api_client: Callable[[], Any] = _api_client) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "--trainjob" or "--" not in args:
        _say(f"usage: python3 -m {MODULE} --trainjob JSON -- ARGV...")
        return EXIT_UNUSABLE
    try:
        compiled = json.loads(args[1])
    except json.JSONDecodeError as err:
        _say(f"--trainjob is not JSON: {err}")
        return EXIT_UNUSABLE
    node_argv = args[args.index("--") + 1 :]
    step = compiled["metadata"]["labels"].get(contract.LABEL_STEP, "step")
    pod = os.environ.get("HOSTNAME") or socket.gethostname()
    job = with_run(compiled, job_name(step, pod), node_argv)
    if os.environ.get(contract.ENV_TRAINER_LOCAL):
        return run_local(job)
    return run_cluster(job, api_client())


if __name__ == "__main__":
    sys.exit(main())
