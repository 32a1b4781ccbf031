"""Multi-node training on the real API server (issue 18): Trainer's and JobSet's real CRDs (the
harness installs every CRD of ../shared/fixtures/crds), a tenant whose profile allows TrainJobs.

- the compiled TrainJob applies, and the runner (impersonated: the bundle's Role) may create it;
- a TrainJob weakened in one way per class is refused by `validate-trainjobs`, naming the rule;
- the node pods built from the JobSet template of Trainer's own torch-distributed runtime are
  admitted, and tampered ones refused, by the server and the offline engine alike;
- the submit program creates the job and its NetworkPolicy as the runner, waits for the status,
  deletes the job; the runner may create no other NetworkPolicy.
"""

import copy
import functools
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from secureml.bundle.trainer import runner_username
from secureml.core import contract
from secureml.pods.mutation.apply import apply_mutations
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_profile
from secureml.rules.identity import JOB_CONTROLLERS
from secureml.trainer.manifest import pod_patch_of, with_run
from secureml.trainer.pods import node_pods
from secureml.trainer.submit import EXIT_CANCELLED, network_policy, run_cluster
from tests.harness.controlplane import ControlPlane
from tests.support.admission import PIPELINE_RUNNER, create_pod, install_tenant, wait_for_policy
from tests.support.profiles import merge, profile_data
from tests.support.trainer import TRAINER, compiled_trainer, torch_runtime

JOB_CONTROLLER = JOB_CONTROLLERS[0]  # who creates a trainer node pod
TENANT = "trainer-server"
GROUP, VERSION = contract.TRAINER_API_VERSION.split("/")
Job = dict[str, Any]


def _profile() -> TenantProfile:
    data = profile_data("team-a")
    data["metadata"]["name"] = TENANT
    data["spec"] = merge(
        data["spec"],
        {"namespace": TENANT, "trainer": TRAINER, "gpu": {"quota": {"nvidia.com/gpu": 8}}},
    )
    return TenantProfile.from_dict(data, source="test:trainer-server")


PROFILE = _profile()


@functools.cache
def _compiled() -> Job:
    compiled = compiled_trainer(PROFILE).steps[0].trainjob
    assert compiled is not None
    return compiled


def _job(name: str = "train-1") -> Job:
    """The compiled TrainJob (compiled once) for one run (`with_run` copies it)."""
    return with_run(_compiled(), name, ["python3", "/app/train.py", "--epochs", "1"])


def _custom(api: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api)


def _create(api: Any, job: Job, dry_run: bool = True) -> str:
    """'' when created, else the server's refusal text."""
    from kubernetes.client.rest import ApiException

    try:
        _custom(api).create_namespaced_custom_object(
            GROUP, VERSION, TENANT, "trainjobs", job, dry_run="All" if dry_run else None
        )
    except ApiException as err:
        return str(err.body)
    return ""


def _network_policy_refusal(api: Any, policy: Job) -> str:
    """'' when the dry run creates it, else the server's refusal text."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        client.NetworkingV1Api(api).create_namespaced_network_policy(TENANT, policy, dry_run="All")
    except ApiException as err:
        return str(err.body)
    return ""


@pytest.fixture(scope="module")
def admin_api(k8s_cluster: ControlPlane) -> Any:
    install_tenant(k8s_cluster, PROFILE)
    api = k8s_cluster.api_client()
    probe = _job("probe")
    probe["spec"]["trainer"]["numNodes"] = 99
    wait_for_policy(
        lambda: "ValidatingAdmissionPolicy" in _create(api, probe), "validate-trainjobs"
    )
    return api


@pytest.fixture(scope="module")
def runner_api(k8s_cluster: ControlPlane, admin_api: Any) -> Any:
    """The runner's connection, once `validate-trainer-netpol` is in force too (`validate-trainjobs`
    in force says nothing of it: an open policy passed unjudged right after the apply in one CI
    run)."""
    api = k8s_cluster.api_client()
    api.set_default_header("Impersonate-User", runner_username(PROFILE))
    probe = network_policy(_job("probe"))
    probe["spec"]["ingress"] = [{}]
    wait_for_policy(
        lambda: "ValidatingAdmissionPolicy" in _network_policy_refusal(api, probe),
        "validate-trainer-netpol",
    )
    return api


def _patch_pod(job: Job) -> Job:
    return pod_patch_of(job)


def _node(job: Job) -> Job:
    node: Job = _patch_pod(job)["spec"]["containers"][0]
    return node


def _set(path: Callable[[Job], Job], key: str, value: Any) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        path(job)[key] = value

    return change


WEAKENED: list[tuple[str, Callable[[Job], None], str]] = [
    ("hostpath-volume", lambda j: _patch_pod(j)["spec"].setdefault("volumes", []).append(
        {"name": "host", "hostPath": {"path": "/var/run"}}), "secureml.trainjob.volumes"),
    ("pvc-volume", lambda j: _patch_pod(j)["spec"].setdefault("volumes", []).append(
        {"name": "data", "persistentVolumeClaim": {"claimName": "x"}}), "secureml.trainjob.volumes"),
    ("mount-on-etc", lambda j: _node(j)["volumeMounts"][0].update(mountPath="/etc/secureml"),
     "secureml.trainjob.volumes"),
    ("privileged", lambda j: _node(j)["securityContext"].update(privileged=True),
     "secureml.trainjob.securityContext"),
    ("writable-root", lambda j: _node(j)["securityContext"].update(readOnlyRootFilesystem=False),
     "secureml.trainjob.securityContext"),
    ("add-capability", lambda j: _node(j)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
     "secureml.trainjob.securityContext"),
    ("pod-run-as-root", lambda j: _patch_pod(j)["spec"]["securityContext"].update(runAsUser=0),
     "secureml.trainjob.securityContext"),
    ("service-account", _set(lambda j: _patch_pod(j)["spec"], "serviceAccountName", "default-editor"),
     "secureml.trainjob.serviceAccount"),
    ("init-container", _set(lambda j: _patch_pod(j)["spec"], "initContainers",
                            [{"name": "node"}]), "secureml.trainjob.containers"),
    ("pull-secret", _set(lambda j: _patch_pod(j)["spec"], "imagePullSecrets", [{"name": "x"}]),
     "secureml.trainjob.containers"),
    ("env-in-patch", lambda j: _node(j).update(env=[{"name": "SECUREML_SCRUB_BEFORE", "value": "false"}]),
     "secureml.trainjob.env"),
    ("ld-preload", lambda j: j["spec"]["trainer"]["env"].append({"name": "LD_PRELOAD", "value": "/x.so"}),
     "secureml.trainjob.env"),
    ("other-pool", lambda j: _patch_pod(j)["spec"]["nodeSelector"].update({"secureml.dev/pool": "shared"}),
     "secureml.trainjob.placement"),
    ("extra-toleration", lambda j: _patch_pod(j)["spec"]["tolerations"].append(
        {"key": "team-b", "operator": "Exists"}), "secureml.trainjob.placement"),
    ("unpinned-image", _set(lambda j: j["spec"]["trainer"], "image", "ghcr.io/acme/train:latest"),
     "secureml.trainjob.image"),
    ("other-registry", _set(lambda j: j["spec"]["trainer"], "image",
                            "docker.io/evil/train@sha256:" + "ab" * 32), "secureml.trainjob.image"),
    ("no-launcher", _set(lambda j: j["spec"]["trainer"], "command", ["python3", "/app/train.py"]),
     "secureml.trainjob.launcher"),
    ("too-many-nodes", _set(lambda j: j["spec"]["trainer"], "numNodes", 5), "secureml.trainjob.nodes"),
    ("too-many-gpus", _set(lambda j: j["spec"]["trainer"], "resourcesPerNode",
                           {"limits": {"nvidia.com/gpu": "4"}}), "secureml.trainjob.resources"),
    ("other-runtime", lambda j: j["spec"]["runtimeRef"].update(name="mpi-distributed"),
     "secureml.trainjob.runtime"),
    ("namespaced-runtime", lambda j: j["spec"]["runtimeRef"].update(kind="TrainingRuntime"),
     "secureml.trainjob.runtime"),
    ("initializer", _set(lambda j: j["spec"], "initializer",
                         {"model": {"storageUri": "hf://x/y"}}), "secureml.trainjob.controller"),
    ("multikueue", _set(lambda j: j["spec"], "managedBy", "kueue.x-k8s.io/multikueue"),
     "secureml.trainjob.controller"),
    ("second-patch", lambda j: j["spec"]["runtimePatches"].append(
        {"manager": "someone.else/x", "trainingRuntimeSpec": {}}), "secureml.trainjob.patch"),
    ("no-node-label", lambda j: _patch_pod(j)["metadata"]["labels"].pop(contract.LABEL_TRAINER_NODE),
     "secureml.trainjob.patch"),
]  # fmt: skip


def test_compiled_trainjob_applies_as_the_runner(runner_api: Any, admin_api: Any) -> None:
    job = _job("applies")
    assert _create(runner_api, job, dry_run=False) == ""
    stored = _custom(admin_api).get_namespaced_custom_object(
        GROUP, VERSION, TENANT, "trainjobs", "applies"
    )
    assert pod_patch_of(stored) == pod_patch_of(job)  # the runtime patch accepted as written
    _custom(admin_api).delete_namespaced_custom_object(
        GROUP, VERSION, TENANT, "trainjobs", "applies"
    )


@pytest.mark.parametrize(("case", "weaken", "rule"), WEAKENED, ids=[w[0] for w in WEAKENED])
def test_weakened_trainjob_is_refused(
    admin_api: Any, case: str, weaken: Callable[[Job], None], rule: str
) -> None:
    job = _job(f"weak-{case}")
    weaken(job)
    refusal = _create(admin_api, job)
    assert "ValidatingAdmissionPolicy" in refusal and rule in refusal, refusal[:600]


def _tampered_nodes() -> list[tuple[str, Job, str]]:
    base = node_pods(_job("nodes"), torch_runtime())[1]
    cases = []
    renamed = copy.deepcopy(base)
    renamed["spec"]["containers"][0]["name"] = "trainer"
    cases.append(("container-renamed", renamed, "secureml.tenantContainers"))
    bare = copy.deepcopy(base)
    bare["spec"]["containers"][0]["command"] = ["python3", "/app/train.py"]
    cases.append(("no-launcher", bare, "secureml.launcherArgv"))
    index = copy.deepcopy(base)
    index["metadata"]["labels"][contract.LABEL_JOB_COMPLETION_INDEX] = "7"
    cases.append(("index-beyond-max-nodes", index, "secureml.trainerNode"))
    scrub = copy.deepcopy(base)
    for entry in scrub["spec"]["containers"][0]["env"]:
        if entry["name"] == contract.ENV_SCRUB_AFTER:
            entry["value"] = "false"
    cases.append(("scrub-off", scrub, "secureml.launcherEnv"))
    return cases


def test_node_pods_from_the_jobset_template_are_judged_like_step_pods(
    k8s_cluster: ControlPlane, admin_api: Any
) -> None:
    cluster = install_tenant(k8s_cluster, PROFILE)
    rules = rules_for_profile(PROFILE)
    pods = node_pods(_job("nodes"), torch_runtime())
    assert [p["spec"]["containers"][0]["image"] for p in pods] == [
        _job()["spec"]["trainer"]["image"]
    ] * 2
    for pod in pods:
        assert evaluate(apply_mutations(pod, PROFILE), rules) == []
        # a node pod comes from the Job controller; as the runner (or a person) it is refused
        runner = evaluate(apply_mutations(pod, PROFILE), rules, created_by=PIPELINE_RUNNER)
        assert [v.rule for v in runner] == ["secureml.pipelineIdentity"]
        answer = create_pod(cluster, pod, TENANT, JOB_CONTROLLER)
        assert answer.admitted, answer.message
        created = answer.created
        assert created is not None
        container = created["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        names = [m["mountPath"] for m in container["volumeMounts"]]
        assert contract.PODINFO_DIR in names  # the mutating policy reached the node pod
        cluster.request("DELETE", f"/api/v1/namespaces/{TENANT}/pods/{created['metadata']['name']}")
    for case, pod, rule in _tampered_nodes():
        offline = {v.rule for v in evaluate(apply_mutations(pod, PROFILE), rules)}
        answer = create_pod(cluster, pod, TENANT, JOB_CONTROLLER)
        assert not answer.admitted, case
        assert rule in offline and rule in answer.message, (case, offline, answer.message[:400])


def test_runner_creates_only_a_jobs_own_network_policy(runner_api: Any) -> None:
    job = _job("netpol")
    assert _network_policy_refusal(runner_api, network_policy(job)) == ""
    open_all = network_policy(job)
    open_all["spec"]["ingress"] = [{}]
    other_tenant = network_policy(job)
    other_tenant["spec"]["egress"][0]["to"][0]["namespaceSelector"] = {}
    for policy in (open_all, other_tenant):
        refusal = _network_policy_refusal(runner_api, policy)
        assert "secureml.trainjobNetworkPolicy" in refusal, refusal[:400]


def _finish_later(admin_api: Any, name: str, condition: str) -> threading.Thread:
    from kubernetes.client.rest import ApiException

    def finish() -> None:
        custom = _custom(admin_api)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                custom.patch_namespaced_custom_object_status(
                    GROUP,
                    VERSION,
                    TENANT,
                    "trainjobs",
                    name,
                    {"status": {"conditions": [{
                        "type": condition, "status": "True", "reason": "Test", "message": "t",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }]}},
                )  # fmt: skip
                return
            except ApiException:  # not created yet
                time.sleep(0.1)

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(("condition", "code"), [("Complete", 0), ("Failed", 1)])
def test_submit_waits_for_the_job_and_deletes_it(
    runner_api: Any, admin_api: Any, condition: str, code: int
) -> None:
    name = f"submit-{condition.lower()}"
    job = _job(name)
    thread = _finish_later(admin_api, name, condition)
    assert run_cluster(job, runner_api, poll_seconds=0.1, install_signals=False) == code
    thread.join()
    assert _gone(admin_api, name)


def test_submit_deletes_the_job_when_cancelled(runner_api: Any, admin_api: Any) -> None:
    job = _job("submit-cancel")
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert run_cluster(job, runner_api, poll_seconds=0.1) == EXIT_CANCELLED
    finally:
        timer.cancel()
    assert _gone(admin_api, "submit-cancel")


def _gone(admin_api: Any, name: str, timeout_s: float = 20.0) -> bool:
    from kubernetes.client.rest import ApiException

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _custom(admin_api).get_namespaced_custom_object(
                GROUP, VERSION, TENANT, "trainjobs", name
            )
        except ApiException as err:
            if err.status == 404:
                return True
        time.sleep(0.2)
    return False


def test_trainer_policies_type_check_without_warnings(
    k8s_cluster: ControlPlane, admin_api: Any
) -> None:
    from secureml.bundle.common import cluster_name
    from secureml.bundle.trainer import NETPOL_POLICY, TRAINJOB_POLICY
    from tests.cluster.test_bundles_apply import _type_warnings

    names = [cluster_name(PROFILE, suffix) for suffix in (TRAINJOB_POLICY, NETPOL_POLICY)]
    assert _type_warnings(k8s_cluster, names) == {name: [] for name in names}
