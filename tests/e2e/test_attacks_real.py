"""Attacks tried, not only refused: in a running step container on the real node, and against the
real API server with the tenant's bundle in force (tests/e2e/conftest.py).

- In the container: the `prep` pod exactly as previewed, its step's command (what follows the
  injected launcher, which the tenant writes) replaced by a probe. The probe runs under the
  platform's launcher, as the step would, and tries to write the image's root, /etc,
  /opt/secureml (the injected runtime), /etc/ld.so.preload and the launcher itself, and to remount
  the root read-write; it reports its uid, capabilities, no_new_privs and seccomp mode.
- At the server: the same pod with one control broken, created for real: refused, naming the rule;
  a writable root asked for is made read-only by the mutating policy; and attack pods of the
  corpus (tests/rules/attacks) refused by this cluster.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from secureml.core import contract
from secureml.pods.workloads import pods_in_text
from tests.e2e import steps
from tests.e2e.environment import E2E
from tests.support import node_pods
from tests.support.admission import PIPELINE_RUNNER
from tests.support.paths import ATTACKS_DIR

pytestmark = [pytest.mark.node, pytest.mark.cluster]

PROBE = r"""
import json, os, subprocess
def attempt(path):
    try:
        with open(path, "a") as handle:
            handle.write("x")
        return "written"
    except OSError as err:
        return err.strerror
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
remount = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True, text=True)
print("PROBE " + json.dumps({
    "writes": {p: attempt(p) for p in (
        "/probe", "/etc/probe", "/usr/lib/probe", "/opt/secureml/probe",
        "/opt/secureml/bin/secureml-launch", "/etc/ld.so.preload", "/tmp/probe")},
    "uid": os.getuid(), "gid": os.getgid(),
    "caps": {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")},
    "remount": remount.returncode,
    "mounts": [l.split()[1:4] for l in open("/proc/self/mounts") if l.split()[1] in ("/", "/opt/secureml", "/etc/ld.so.preload")],
}))
"""


@pytest.fixture(scope="module")
def prep_pod(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    docs = steps.compile_reference(
        e2e.step_image, e2e.profile_path, tmp_path_factory.mktemp("compile")
    )
    pod = steps.previewed(docs, e2e.profile, mutate=False)["prep"]
    return steps.as_run(pod, steps.run_values(docs, pod, "prep", execution=1))


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)


def _named(pod: dict[str, Any], name: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] = name
    return pod


def test_the_running_step_cannot_write_its_root_or_the_runtime(
    e2e: E2E, prep_pod: dict[str, Any]
) -> None:
    pod = _named(prep_pod, "probe-readonly")
    main = _main(pod)
    prefix = list(contract.RUNTIME_LAUNCHER_PREFIX)
    assert main["args"][: len(prefix)] == prefix, main["args"][:4]
    main["args"] = [*prefix, "python3", "-c", PROBE]
    e2e.pool({})
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{e2e.namespace}/pods", pod, as_user=PIPELINE_RUNNER
    )
    assert status == 201, answer
    done = node_pods.wait_for_end(e2e.cluster, e2e.namespace, "probe-readonly", timeout_s=240.0)
    log = node_pods.log(e2e.cluster, e2e.namespace, "probe-readonly", "main")
    assert done["status"]["phase"] == "Succeeded", (steps.container_states(done), log)
    seen = json.loads(next(ln for ln in log.splitlines() if ln.startswith("PROBE "))[6:])
    writes = seen["writes"]
    assert writes.pop("/tmp/probe") == "written"  # the scratch emptyDir the profile allows
    # a new file anywhere else: EROFS; an existing file of root's: EACCES comes first, its mount is
    # read-only all the same (`mounts` below)
    launcher = writes.pop("/opt/secureml/bin/secureml-launch")
    preload = writes.pop("/etc/ld.so.preload")
    assert set(writes.values()) == {"Read-only file system"}, seen["writes"]
    assert {launcher, preload} <= {"Read-only file system", "Permission denied"}, seen["writes"]
    assert (seen["uid"], seen["gid"]) == (1000, 1000)
    assert seen["caps"] == {
        "CapEff": "0" * 16,
        "CapPrm": "0" * 16,
        "CapBnd": "0" * 16,
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }, seen["caps"]
    assert seen["remount"] != 0  # no CAP_SYS_ADMIN: the root stays read-only
    mounts = {point: options for point, _, options in seen["mounts"]}
    assert all(options.split(",")[0] == "ro" for options in mounts.values()), mounts
    assert {"/", "/opt/secureml", "/etc/ld.so.preload"} <= set(mounts), mounts
    record = steps.audit_record(log)
    assert record["exit_code"] == 0


def _refusal(e2e: E2E, pod: dict[str, Any]) -> str:
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{e2e.namespace}/pods", pod, as_user=PIPELINE_RUNNER
    )
    assert status in (400, 403, 422), f"admitted (HTTP {status}): {pod['metadata']['name']}"
    return str(answer.get("message", answer))


def _privileged(pod: dict[str, Any]) -> None:
    _main(pod)["securityContext"]["privileged"] = True


def _ld_preload(pod: dict[str, Any]) -> None:
    _main(pod)["env"].append({"name": "LD_PRELOAD", "value": "/tmp/evil.so"})


def _own_runtime(pod: dict[str, Any]) -> None:
    """A tenant's own volume over the runtime's folder (a launcher of its choosing)."""
    pod["spec"]["volumes"].append({"name": "mine", "emptyDir": {}})
    _main(pod)["volumeMounts"].append({"name": "mine", "mountPath": "/opt/secureml/bin"})


def _host_path(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append(
        {"name": "host", "hostPath": {"path": "/run/containerd/containerd.sock"}}
    )
    _main(pod)["volumeMounts"].append({"name": "host", "mountPath": "/host.sock"})


def _another_launcher(pod: dict[str, Any]) -> None:
    _main(pod)["args"] = ["python3", "-c", "print('no launcher')"]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    every = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    return next(c for c in every if c["name"] == name)


def _exec_probe(pod: dict[str, Any]) -> None:
    """Class 1: tenant code the kubelet runs in `main` beside the launcher, not under it."""
    _main(pod)["livenessProbe"] = {"exec": {"command": ["sh", "-c", "nvidia-smi"]}}


def _hook_on_wait(pod: dict[str, Any]) -> None:
    """Class 2: a hook on Argo's `wait`, run before `main` starts (it could rewrite argoexec)."""
    _container(pod, "wait")["lifecycle"] = {
        "postStart": {"exec": {"command": ["sh", "-c", "cp /tmp/x /var/run/argo/argoexec"]}}
    }


def _restart_on_failure(pod: dict[str, Any]) -> None:
    """Class 3: a re-run of `main` after a first run replaced /kfp-launcher/launch."""
    pod["spec"]["restartPolicy"] = "OnFailure"


def _launcher_as_sidecar(pod: dict[str, Any]) -> None:
    """Classes 2-3: KFP's launcher copy made a native sidecar, restarted at will."""
    _container(pod, "kfp-launcher")["restartPolicy"] = "Always"


def _debug_pause(pod: dict[str, Any]) -> None:
    """Argo's emissary holding `main` (GPU allocated) before the launcher runs."""
    _main(pod)["env"].append({"name": "ARGO_DEBUG_PAUSE_BEFORE", "value": "true"})


BREAKS = {  # the change, and what the refusal may name (rule ids, or PodSecurity's check)
    "privileged": (_privileged, ("privileged",)),
    "ld-preload": (_ld_preload, ("secureml.forbiddenEnv",)),
    "own-runtime": (_own_runtime, ("secureml.mountPaths",)),
    "host-path": (_host_path, ("hostPath",)),
    "no-launcher": (_another_launcher, ("secureml.launcherArgv",)),
    "exec-probe": (_exec_probe, ("secureml.noExecHandlers",)),
    # the hook reaches Argo's ARGO_TEMPLATE too: the server names whichever rule fails first
    "hook-on-wait": (_hook_on_wait, ("secureml.noExecHandlers", "secureml.systemContainers")),
    "restart-on-failure": (_restart_on_failure, ("secureml.noRestart",)),
    "launcher-sidecar": (_launcher_as_sidecar, ("secureml.noRestart", "secureml.systemContainers")),
    "debug-pause": (_debug_pause, ("secureml.noDebugPause",)),
}


@pytest.mark.parametrize("attack", sorted(BREAKS))
def test_a_pod_breaking_a_control_is_refused(
    e2e: E2E, prep_pod: dict[str, Any], attack: str
) -> None:
    change, named = BREAKS[attack]
    pod = _named(prep_pod, f"attack-{attack}")
    change(pod)
    message = _refusal(e2e, pod)
    assert any(name.lower() in message.lower() for name in named), message
    status, _ = e2e.cluster.request(
        "GET", f"/api/v1/namespaces/{e2e.namespace}/pods/attack-{attack}"
    )
    assert status == 404


def test_a_writable_root_asked_for_is_made_read_only(e2e: E2E, prep_pod: dict[str, Any]) -> None:
    pod = _named(prep_pod, "attack-writable-root")
    _main(pod)["securityContext"]["readOnlyRootFilesystem"] = False
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{e2e.namespace}/pods", pod, as_user=PIPELINE_RUNNER
    )
    if status == 201:  # mutated, not refused: the MAP sets the control on every container
        stored = _main(answer)["securityContext"]["readOnlyRootFilesystem"]
        e2e.cluster.request(
            "DELETE", f"/api/v1/namespaces/{e2e.namespace}/pods/attack-writable-root"
        )
        assert stored is True
    else:
        assert "readOnlyRootFilesystem" in str(answer), answer


CORPUS = (
    "t05-env-ld-preload.yaml",
    "t03-hostpath-containerd-sock.yaml",
    "t01-privileged-main.yaml",
)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_attacks_are_refused_by_this_cluster(e2e: E2E, name: str) -> None:
    text = (ATTACKS_DIR / name).read_text()
    (found,) = list(pods_in_text(text, source=name))
    pod = copy.deepcopy(found.pod)
    expected = pod["metadata"]["annotations"]["test.secureml.dev/expect"]
    pod["metadata"]["namespace"] = e2e.namespace
    pod["metadata"]["name"] = f"corpus-{name.split('.')[0]}"
    message = _refusal(e2e, pod)
    assert expected.split(".")[0] in message or "violates PodSecurity" in message, message
