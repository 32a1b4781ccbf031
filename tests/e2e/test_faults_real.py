"""Faults on the real node (tests/e2e/conftest.py). The SPIRE agent stopped mid-run is in
test_identity_real.py.

- The API server restarted: the tenant's admission policies are in force from its first answer
  on: pods that break a control are refused naming the rule, and the runtime is still injected.
- A step's launcher killed before its scrub-after zeroed the fake GPU (the worst point of a kill
  during the scrub: nothing zeroed): the step's secret is left in the device's memory (read on the
  host, in the fake GPU's memory file), and the next pod on that GPU zeroes it in its scrub-before
  before its step runs: the step reads no byte of it (docs/threat-model.md, "Residue in GPU
  memory": scrub before and after).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from secureml.core import contract
from tests.e2e import stepruns
from tests.e2e.environment import E2E
from tests.support import admission, node_pods

pytestmark = [pytest.mark.node, pytest.mark.cluster]

SECRET = b"TEAM-A-SECRET-0123456789abcdef!!"  # 32 bytes, planted 1 MiB of times 32768
CUDA = r"""
import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1")
u64, size_t = ctypes.c_uint64, ctypes.c_size_t
cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size_t]
cu.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, size_t]
cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, size_t]
def ok(rc, what):
    if rc != 0:
        print(f"{what}: CUDA error {rc}", flush=True)
        sys.exit(3)
ok(cu.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
"""
WRITER = (
    CUDA
    + f"""
secret = {SECRET!r} * 32768
ptr = u64()
ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), len(secret)), "cuMemAlloc")
ok(cu.cuMemcpyHtoD_v2(ptr.value, secret, len(secret)), "cuMemcpyHtoD")
print("SECRET-WRITTEN", flush=True)
time.sleep(600)
"""
)
READER = (
    CUDA
    + f"""
import json
found, read, chunk = 0, 0, 64 << 20
for _ in range(8):  # the first 512 MiB it is given: where the killed step's block was
    ptr = u64()
    if cu.cuMemAlloc_v2(ctypes.byref(ptr), chunk) != 0:
        break
    buf = ctypes.create_string_buffer(chunk)
    ok(cu.cuMemcpyDtoH_v2(buf, ptr.value, chunk), "cuMemcpyDtoH")
    found += buf.raw.count({SECRET!r})
    read += chunk
print("READ " + json.dumps({{"read": read, "secret_copies": found}}), flush=True)
"""
)


@pytest.fixture(scope="module")
def compiled(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> stepruns.Compiled:
    return stepruns.compile_pods(e2e, tmp_path_factory.mktemp("compile"))


def _refused(e2e: E2E, pod: dict[str, Any]) -> str:
    status, answer = e2e.cluster.request(
        "POST", f"/api/v1/namespaces/{e2e.namespace}/pods", pod, as_user=admission.PIPELINE_RUNNER
    )
    assert status in (400, 403, 422), f"admitted (HTTP {status}): {pod['metadata']['name']}"
    return str(answer.get("message", answer))


def test_after_an_api_server_restart_the_policies_are_still_in_force(
    e2e: E2E, compiled: stepruns.Compiled
) -> None:
    seconds = e2e.cluster.restart_apiserver()
    print(f"\nkube-apiserver ready again {seconds:.1f} s after SIGTERM")
    # at once: the first pods the restarted server judges
    privileged = compiled.pod("prep", "restart-privileged")
    stepruns.main_container(privileged)["securityContext"]["privileged"] = True
    preload = compiled.pod("prep", "restart-ld-preload")
    stepruns.main_container(preload)["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"})
    own_launcher = compiled.pod("prep", "restart-no-launcher")
    stepruns.main_container(own_launcher)["args"] = ["python3", "-c", "print('no launcher')"]
    for pod, rule in (
        (privileged, "privileged"),
        (preload, "secureml.forbiddenEnv"),
        (own_launcher, "secureml.launcherArgv"),
    ):
        message = _refused(e2e, pod)
        assert rule.lower() in message.lower(), message
    # and the mutating policy still injects the runtime (a dry run of the pod as Argo submits it)
    status, stored = e2e.cluster.request(
        "POST",
        f"/api/v1/namespaces/{e2e.namespace}/pods?dryRun=All",
        compiled.pod("prep", "restart-dry-run"),
        as_user=admission.PIPELINE_RUNNER,
    )
    assert status == 201, stored
    inits = [c["name"] for c in stored["spec"]["initContainers"]]
    assert inits[0] == contract.RUNTIME_INIT_CONTAINER, inits
    admission.wait_in_force(admission.admin(e2e.cluster), e2e.profile, timeout_s=5.0)


def _gpu_memory_files(e2e: E2E, resource: str) -> list[Path]:
    """The fake GPU's device memory on the host: `<config>.mem<slot>` in the machine's folder
    (tests/e2e/environment.py gives FakeGpuPlugins `<session folder>/gpu`, the profile's folder)."""
    folder = e2e.profile_path.parent / "gpu" / resource.replace("/", "_")
    return sorted(p for p in folder.rglob("*.mem*") if p.is_file())  # made by its first user


def _copies_on_host(files: list[Path]) -> int:
    """How many times SECRET is in the files' data (holes skipped: the fake's memory is sparse)."""
    copies = 0
    for path in files:
        with path.open("rb") as handle:
            fd, end, offset = handle.fileno(), os.fstat(handle.fileno()).st_size, 0
            while offset < end:
                try:
                    start = os.lseek(fd, offset, os.SEEK_DATA)
                except OSError:  # ENXIO: no data after offset
                    break
                stop = os.lseek(fd, start, os.SEEK_HOLE)
                os.lseek(fd, start, os.SEEK_SET)
                copies += os.read(fd, stop - start).count(SECRET)
                offset = stop
    return copies


def test_a_step_killed_before_its_scrub_leaves_nothing_for_the_next_pod(
    e2e: E2E, compiled: stepruns.Compiled
) -> None:
    resource = "nvidia.com/mig-1g.10gb"  # the train step's GPU
    before = _copies_on_host(_gpu_memory_files(e2e, resource))
    assert before == 0, before
    writer = stepruns.with_step(
        compiled.pod("train", "scrub-kill-writer"), ["python3", "-c", WRITER]
    )
    e2e.pool(stepruns.POOLS["train"])
    stepruns.create(e2e, writer)
    stepruns.wait_for_line(e2e, "scrub-kill-writer", "SECRET-WRITTEN")
    status, running = e2e.cluster.request(
        "GET", f"/api/v1/namespaces/{e2e.namespace}/pods/scrub-kill-writer"
    )
    assert status == 200, running
    launcher = stepruns.launcher_pid(running["metadata"]["uid"])
    os.kill(launcher, signal.SIGKILL)  # the step still runs: scrub-after has not started
    killed = node_pods.wait_for_end(e2e.cluster, e2e.namespace, "scrub-kill-writer", 120.0)
    assert killed["status"]["phase"] == "Failed", killed["status"]
    log = node_pods.log(e2e.cluster, e2e.namespace, "scrub-kill-writer", "main")
    assert contract.AUDIT_LINE_PREFIX not in log, log  # the launcher never finished
    files = _gpu_memory_files(e2e, resource)
    assert files, "the fake GPU has no memory file after a step used it"
    left = _copies_on_host(files)
    assert left == 32768, left  # the residue is really there for the next pod
    print(f"\nafter the kill: {left} copies of the secret in the fake GPU's memory")

    started = time.monotonic()
    reader = stepruns.with_step(
        compiled.pod("train", "scrub-kill-reader"), ["python3", "-c", READER]
    )
    ran = stepruns.run(e2e, reader, "train")
    stages = {name: stage["status"] for name, stage in ran.stages().items()}
    print(f"next pod: {ran.pod['status']['phase']} in {time.monotonic() - started:.1f} s, {stages}")
    if ran.pod["status"]["phase"] == "Succeeded":  # zeroed before its step ran
        assert stages["scrub-before"] == "ok", ran.explain()
        (seen,) = ran.lines("READ ")
        assert seen["read"] > 0 and seen["secret_copies"] == 0, seen
        assert _copies_on_host(files) == 0
    else:  # or refused to start the step
        assert stages["scrub-before"] == "failed" and stages["run"] == "skipped", ran.explain()
        assert "READ " not in ran.log
