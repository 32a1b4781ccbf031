"""A secure TrainJob, as a compiled trainer step submits it, run by the real Kubeflow Trainer v2.3.0
and JobSet v0.12.0 controllers (tests/harness/trainer_controllers.py) with two nodes on the real
node of the e2e session, under its tenant's bundle.

The tenant is the session's profile with `spec.trainer` (2 nodes) as `team-t`, in a namespace of
its own, so the session's team-a stays as the other e2e tests expect it. The pipeline's one trainer
step is compiled by `secureml.compile`; the step's own program (`secureml.trainer.submit`,
`run_cluster`) then creates the compiled TrainJob and its NetworkPolicy as the tenant's runner
service account, waits and deletes, exactly as in the step's pod; the test plays KFP's driver
only, filling the component's `{{$}}` with its executor input. Trainer merges the TrainJob into its
own `torch-distributed` ClusterTrainingRuntime, JobSet and the Job controller make the two node
pods, the tenant's MutatingAdmissionPolicy injects the platform runtime into each and its
ValidatingAdmissionPolicies judge them, and the kubelet runs them.

torch is not in the step image (nor installable here); each node runs a plain-Python workload
instead, under the launcher: a real rendezvous over the pod network with the environment Trainer's
torch plugin sets (`PET_MASTER_ADDR`, a DNS name resolved by the cluster DNS stand-in,
`PET_MASTER_PORT`, `PET_NNODES`, `PET_NODE_RANK`), one all-reduce, then NetworkPolicy probes
with real traffic: node 0 listens again for a while and logs every connection it accepts; node 1
connects to it (allowed: the job's own NetworkPolicy), a pod outside the job tries too (refused),
and each node tries a pod outside the job (refused).
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.compile.compiler import compile_pipeline
from secureml.core import contract
from secureml.profile.model import TenantProfile, load_profile
from secureml.trainer import pods as trainer_pods
from secureml.trainer import submit
from tests.e2e import steps
from tests.e2e.environment import E2E, IDENTITY_REQUIRED
from tests.e2e.trainjob_pipeline import HOLD_S, NODES, STEP, rendezvous_pipeline
from tests.harness.cluster_dns import ClusterDNS
from tests.harness.trainer_controllers import TrainerControllers
from tests.support import node_pods
from tests.support.admission import install_tenant

pytestmark = [pytest.mark.node, pytest.mark.cluster]

TENANT = "team-t"
TRAINER = {"maxNodes": 2, "maxGpusPerNode": 1, "allowedRuntimes": ["torch-distributed"]}
PROBE_PORT = 29500  # the bystander's port (Trainer's rendezvous port too)
BYSTANDERS = "trainjob-bystanders"  # a namespace without policies: pods outside the job
GROUP, VERSION = contract.TRAINER_API_VERSION.split("/")
TRAINJOBS = f"/apis/{GROUP}/{VERSION}/namespaces/{TENANT}/trainjobs"


def _profile(e2e: E2E, folder: Path) -> TenantProfile:
    spec = yaml.safe_load(e2e.profile_path.read_text())
    spec["metadata"]["name"] = TENANT
    spec["spec"]["namespace"] = TENANT
    spec["spec"]["trainer"] = TRAINER
    path = folder / f"{TENANT}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_profile(path)


@pytest.fixture(scope="module")
def trainer(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The controllers, the cluster DNS, the tenant and the compiled step (module-scoped)."""
    folder = tmp_path_factory.mktemp("trainer")
    profile = _profile(e2e, folder)
    with contextlib.ExitStack() as stack:
        controllers = stack.enter_context(TrainerControllers(e2e.cluster, folder / "controllers"))
        stack.enter_context(ClusterDNS(e2e.cluster, e2e.network, e2e.step_image))
        install_tenant(e2e.cluster, profile)
        e2e.pool({})  # the general pool: test_steps_run may have left a GPU pool's label
        compiled = compile_pipeline(rendezvous_pipeline(e2e.step_image), profile)
        docs = list(yaml.safe_load_all(compiled.yaml_text))
        container = docs[0]["deploymentSpec"]["executors"][f"exec-{STEP}"]["container"]
        e2e.cluster.create_namespace(BYSTANDERS)
        print(f"\ntrainer controllers ready in {controllers.started_in_s:.1f} s")
        yield {
            "profile": profile,
            "command": container["command"],
            "args": container["args"],
            "controllers": controllers,
        }


def _bystander(e2e: E2E, name: str, script: str) -> dict[str, Any]:
    manifest = node_pods.pod(name, e2e.node.image("busybox"), script, env={"NETPROBE_NAME": name})
    del manifest["spec"]["nodeSelector"]
    node_pods.create(e2e.cluster, BYSTANDERS, manifest)
    return manifest


def _wait_running_ip(e2e: E2E, namespace: str, name: str, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    current: Any = None
    while time.monotonic() < deadline:
        _, current = e2e.cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        status = (current or {}).get("status", {})
        if status.get("phase") == "Running" and status.get("podIP"):
            return str(status["podIP"])
        time.sleep(0.2)
    raise AssertionError(f"pod {namespace}/{name} not running: {current}")


def _runner_client(e2e: E2E, profile: TenantProfile) -> Any:
    """A kubernetes ApiClient acting as the tenant's runner service account (what the step's pod
    runs as), by impersonation from the admin credential."""
    client = e2e.cluster.api_client()
    namespace = profile.spec.namespace
    client.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{namespace}:{contract.RUNNER_NAME}"
    )
    return client


def _executor_input(bystander: str) -> str:
    return json.dumps(
        {
            "inputs": {"parameterValues": {"bystander": bystander, "hold": HOLD_S}},
            "outputs": {"outputFile": "/tmp/kfp_outputs/output_metadata.json"},
        },
        separators=(",", ":"),
    )


def _node_argv(trainer: dict[str, Any], bystander: str) -> tuple[dict[str, Any], list[str]]:
    """The compiled TrainJob and the node argv the step passes it (KFP's `{{$}}` filled)."""
    command = list(trainer["command"])
    job = submit.trainjob_of(command)
    assert job is not None, command
    after = command[command.index("--trainjob") + 2 :]
    assert after[0] == "--", after
    filled = [_executor_input(bystander) if a == "{{$}}" else a for a in trainer["args"]]
    return job, [*after[1:], *filled]


@pytest.fixture(scope="module")
def run(e2e: E2E, trainer: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob run once: created by `submit.run_cluster` as the runner, watched meanwhile."""
    namespace = TENANT
    _bystander(e2e, "bystander-server", f"exec netprobe serve :{PROBE_PORT}")
    server_ip = _wait_running_ip(e2e, BYSTANDERS, "bystander-server")
    compiled, argv = _node_argv(trainer, f"{server_ip}:{PROBE_PORT}")
    name = submit.job_name(STEP, "e2e-step-pod")
    job = submit.with_run(compiled, name, argv)
    output = io.StringIO()
    result: dict[str, Any] = {}

    def submit_it() -> None:
        with contextlib.redirect_stdout(output):
            result["exit"] = submit.run_cluster(
                job,
                _runner_client(e2e, trainer["profile"]),
                poll_seconds=0.5,
                install_signals=False,
            )

    started = time.monotonic()
    thread = threading.Thread(target=submit_it, daemon=True)
    thread.start()
    seen: dict[str, dict[str, Any]] = {}
    policy: dict[str, Any] = {}
    client_log = ""
    selector = f"{contract.LABEL_JOBSET_NAME}={name}"
    node0 = ""
    while thread.is_alive() and time.monotonic() - started < 300:
        _, found = e2e.cluster.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
        )
        for pod in (found or {}).get("items", []):
            seen[pod["metadata"]["name"]] = pod
            index = pod["metadata"]["labels"].get(contract.LABEL_JOB_COMPLETION_INDEX)
            if index == "0" and pod["status"].get("phase") == "Running":
                node0 = pod["metadata"]["name"]
        if not policy:
            status, answer = e2e.cluster.request(
                "GET",
                f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/"
                f"{submit.NETWORK_POLICY_PREFIX}{name}",
            )
            policy = answer if status == 200 else {}
        if node0 and not client_log:
            text = node_pods.log(e2e.cluster, namespace, node0, contract.TRAINER_NODE_CONTAINER)
            if "holding" in text:
                ip = seen[node0]["status"]["podIP"]
                client_log = _probe(e2e, [f"{ip}:{PROBE_PORT}", f"{server_ip}:{PROBE_PORT}"])
        time.sleep(0.5)
    if thread.is_alive():  # not ended in time: delete the job, and `run_cluster` returns
        e2e.cluster.request("DELETE", f"{TRAINJOBS}/{name}")
    thread.join(timeout=60)
    seconds = time.monotonic() - started
    print(f"\nTrainJob {name}: exit {result.get('exit')} in {seconds:.1f} s")
    for line in output.getvalue().splitlines():
        if line.startswith("[node ") and not line.startswith(("[node 0] {", "[node 1] {")):
            print(line[:200])
    print(f"bystander client:\n{client_log}")
    return {
        "name": name,
        "trainjob": job,
        "exit": result.get("exit"),
        "output": output.getvalue(),
        "pods": seen,
        "policy": policy,
        "client": client_log,
        "server_ip": server_ip,
        "seconds": seconds,
    }


def _probe(e2e: E2E, targets: list[str]) -> str:
    """A pod outside the job that connects to `targets`; its log (`HOST:PORT open|closed ...`)."""
    name = f"bystander-client-{int(time.monotonic() * 1000) % 100000}"
    manifest = _bystander(e2e, name, "exec netprobe connect " + " ".join(targets))
    manifest["spec"]["containers"][0]["env"].append({"name": "NETPROBE_TIMEOUT", "value": "3s"})
    done = node_pods.wait_for_end(e2e.cluster, BYSTANDERS, name, timeout_s=60)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    return node_pods.log(e2e.cluster, BYSTANDERS, name)


def _node_lines(output: str, index: int) -> list[str]:
    prefix = f"[node {index}] "
    return [line[len(prefix) :] for line in output.splitlines() if line.startswith(prefix)]


def _explain(run: dict[str, Any]) -> str:
    states = {
        n: (p["status"].get("phase"), p["status"].get("conditions")) for n, p in run["pods"].items()
    }
    return json.dumps({"states": states, "output": run["output"][-6000:]}, indent=1)


def test_trainjob_runs_two_nodes_to_complete(run: dict[str, Any]) -> None:
    assert run["exit"] == 0, _explain(run)
    assert f"TrainJob {TENANT}/{run['name']}: Complete" in run["output"] or run["exit"] == 0
    phases = sorted(p["status"].get("phase") for p in run["pods"].values())
    assert phases == ["Succeeded"] * NODES, _explain(run)


def test_nodes_rendezvous_over_the_cluster_dns(run: dict[str, Any]) -> None:
    name = run["name"]
    for index in range(NODES):
        lines = _node_lines(run["output"], index)
        found = [line for line in lines if line.startswith("rendezvous:")]
        assert len(found) == 1, lines
        assert found[0].startswith(
            f"rendezvous: node {index} of {NODES}, {name}-node-0-0.{name} is "
        ), found
        assert found[0].endswith("sum 3"), found
        node0 = next(
            p
            for p in run["pods"].values()
            if p["metadata"]["labels"][contract.LABEL_JOB_COMPLETION_INDEX] == "0"
        )
        assert f" is {node0['status']['podIP']}, " in found[0], found  # the DNS's answer


def test_each_node_runs_under_the_tenants_rules(run: dict[str, Any], e2e: E2E) -> None:
    """Every node pod: admitted with the tenant's labels, the runner, the hardening, the platform
    runtime injected (init container, launcher prefix) and the launcher's audit record."""
    for pod in run["pods"].values():
        labels = pod["metadata"]["labels"]
        assert labels[contract.LABEL_TENANT] == TENANT
        assert labels[contract.LABEL_STEP] == STEP
        assert labels[contract.LABEL_TRAINER_NODE] == "true"
        spec = pod["spec"]
        assert spec["serviceAccountName"] == contract.RUNNER_NAME
        assert spec["nodeName"] == e2e.node.name
        assert spec["securityContext"]["runAsNonRoot"] is True
        inits = [c["name"] for c in spec.get("initContainers", [])]
        assert contract.RUNTIME_INIT_CONTAINER in inits, inits
        node = next(c for c in spec["containers"] if c["name"] == contract.TRAINER_NODE_CONTAINER)
        prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
        assert node["command"][: len(prefix)] == prefix, node["command"]
        assert node["image"] == e2e.step_image
        context = node["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert context["readOnlyRootFilesystem"] is True
    identity = "ok" if IDENTITY_REQUIRED else "skipped"
    for index in range(NODES):
        text = "\n".join(_node_lines(run["output"], index))
        record = steps.audit_record(text)
        stages = {stage["name"]: stage["status"] for stage in record["stages"]}
        assert record["exit_code"] == 0, record
        assert stages["config"] == stages["run"] == "ok", stages
        assert stages["identity"] == identity, stages
        assert record["expected_spiffe_id"].endswith(f"/step/{STEP}/node/{index}"), record


def _rendezvous(pod: dict[str, Any]) -> dict[str, Any]:
    """What Trainer's torch plugin and the Job controller give the node container: its `PET_*`
    and `JOB_COMPLETION_INDEX` variables (a fieldRef without the server's default apiVersion)
    and its ports."""
    node = next(
        c for c in pod["spec"]["containers"] if c["name"] == contract.TRAINER_NODE_CONTAINER
    )
    env = {}
    for variable in node.get("env", []):
        if variable["name"].startswith("PET_") or variable["name"] == "JOB_COMPLETION_INDEX":
            source = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            env[variable["name"]] = variable.get("value", source)
    ports = [(p["containerPort"], p.get("protocol", "TCP")) for p in node.get("ports", [])]
    return {"env": env, "ports": ports}


def test_the_model_of_the_node_pods_matches_the_real_ones(run: dict[str, Any]) -> None:
    """secureml.trainer.pods (what compile judges for a TrainJob's nodes) against the pods the
    real controllers made: the rendezvous environment and ports agree, node by node."""
    assert len(run["pods"]) == NODES, _explain(run)
    for pod in run["pods"].values():
        index = int(pod["metadata"]["labels"][contract.LABEL_JOB_COMPLETION_INDEX])
        modelled = trainer_pods.node_pod(run["trainjob"], index)
        assert _rendezvous(pod) == _rendezvous(modelled), pod["metadata"]["name"]


def test_network_policy_opens_the_job_to_itself_only(run: dict[str, Any]) -> None:
    """The job's NetworkPolicy (created by the step, owned by the TrainJob) and real traffic:
    node 1 reaches node 0's port; a pod outside the job does not (its other target, the
    bystander server, answers it: the probe itself works); no node reaches the bystander."""
    policy = run["policy"]
    name = run["name"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {contract.LABEL_JOBSET_NAME: name}}
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    pods = {
        p["metadata"]["labels"][contract.LABEL_JOB_COMPLETION_INDEX]: p
        for p in run["pods"].values()
    }
    node0_ip, node1_ip = pods["0"]["status"]["podIP"], pods["1"]["status"]["podIP"]
    node0 = _node_lines(run["output"], 0)
    assert f"accepted {node1_ip}" in node0, node0
    client = dict(line.split(" ", 1) for line in run["client"].splitlines() if " " in line)
    # dropped by the policy (a timeout), not refused: node 0 was listening
    verdict = client[f"{node0_ip}:{PROBE_PORT}"]
    assert verdict.startswith("closed") and "timeout" in verdict, run["client"]
    assert client[f"{run['server_ip']}:{PROBE_PORT}"].startswith("open"), run["client"]
    accepted = [line for line in node0 if line.startswith("accepted ")]
    assert accepted == [f"accepted {node1_ip}"], node0
    for index in range(NODES):
        lines = _node_lines(run["output"], index)
        egress = [line for line in lines if line.startswith("egress to ")]
        assert len(egress) == 1 and ": closed (timed out)" in egress[0], lines


def _weakened(trainer: dict[str, Any], change: str) -> dict[str, Any]:
    compiled, argv = _node_argv(trainer, "10.0.0.1:1")
    job = submit.with_run(compiled, f"weak-{change.lower()}", argv)
    spec = job["spec"]
    template = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod = template["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    if change == "launcher":
        spec["trainer"]["command"] = argv
    elif change == "securityContext":
        pod["containers"][0]["securityContext"]["runAsNonRoot"] = False
        pod["containers"][0]["securityContext"]["runAsUser"] = 0
    elif change == "resources":
        spec["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "4"}}
    elif change == "image":
        spec["trainer"]["image"] = "docker.io/library/python@sha256:" + "a" * 64
    elif change == "runtime":
        spec["runtimeRef"] = {"apiGroup": GROUP, "kind": "TrainingRuntime", "name": "mine"}
    return job


@pytest.mark.parametrize("change", ["launcher", "securityContext", "resources", "image", "runtime"])
def test_a_weakened_trainjob_is_refused(e2e: E2E, trainer: dict[str, Any], change: str) -> None:
    """Created as the runner: refused at admission, the message names our rule."""
    job = _weakened(trainer, change)
    client = _runner_client(e2e, trainer["profile"])
    status, body = _post_as(client, job)
    assert status in (400, 403, 422), (status, body)
    assert f"secureml.trainjob.{change}:" in body["message"], body["message"]


def _post_as(client: Any, body: dict[str, Any]) -> tuple[int, Any]:
    """Create the TrainJob through `client`: (HTTP status, the answer or the Status)."""
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    namespace = body["metadata"]["namespace"]
    try:
        answer = k8s.CustomObjectsApi(client).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", body
        )
    except ApiException as error:
        return int(error.status), json.loads(error.body)
    return 201, answer
