"""The fake NVIDIA GPU on the test node, through the kubelet's device-plugin API.

`FakeGpuPlugins(node, folder)` (a context manager) runs, per extended resource `add`ed, one
`fake-device-plugin` (tests/harness/e2e/fake-device-plugin, built by `tests/harness/build.sh e2e`;
k8s.io/kubelet's deviceplugin/v1beta1 API, the node's version) registered with the node's kubelet.
Each has a fake GPU machine of its own (`secureml.localrun.runner.fake_machine_for`: what the
request holds, a MIG instance or a time-sliced share) and gives every container it is allocated to
what the NVIDIA container toolkit gives a container with a real GPU: the driver's `libcuda.so.1`
and `libnvidia-ml.so.1` (here the fake ones, enforcement/shim/fake) mounted read-only into
`/usr/lib/x86_64-linux-gnu`, the driver's state (here the fake machine's folder, its "device
memory", at FAKE_GPU_DIR) and the fake driver's configuration variable. The pod itself names only
the resource, as a compiled step does; nothing is added to it.

Why ours and not NVIDIA's k8s-device-plugin: NVIDIA's discovers devices through the real NVML and
the NVIDIA container toolkit's libraries (nvidia-container-toolkit's CDI or runtime hook) to
mount the driver; neither runs over the fake libraries on this machine, where no NVIDIA kernel
module or /dev/nvidia* exists.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from .controlplane import HarnessError
from .node import Node

DRIVER_DIR = "/usr/lib/x86_64-linux-gnu"  # where the NVIDIA toolkit mounts the driver's libraries
FAKE_GPU_DIR = "/var/lib/fake-gpu"  # the fake machine's state inside the container
STEP_UID = 1000  # the example profiles' hardening.runAsUser: the fake's state is written as it


class FakeGpuPlugins:
    def __init__(self, node: Node, folder: Path, binary: Path) -> None:
        self.node = node
        self.folder = folder
        self.binary = binary
        self.machines: dict[str, object] = {}
        self._processes: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []

    def add(self, resource: str, request: object, count: int = 1) -> None:
        """Advertise `count` of `resource`, each a fake machine holding `request` (a GPU
        request: `MIG(...)`, `TimeSlice(...)`), and wait until the Node's allocatable has them."""
        from secureml.localrun.runner import fake_machine_for

        state = self.folder / resource.replace("/", "_")
        machine, visible = fake_machine_for(request, state)  # type: ignore[arg-type]
        self.machines[resource] = machine
        driver = self.folder / "driver"
        driver.mkdir(parents=True, exist_ok=True)
        for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
            shutil.copy(machine.lib_dir / name, driver / name)  # type: ignore[attr-defined]
            (driver / name).chmod(0o755)
        subprocess.run(["chown", "-R", f"{STEP_UID}:{STEP_UID}", str(state)], check=True)
        log = (self.folder / f"{state.name}.log").open("wb")
        process = subprocess.Popen(
            [
                str(self.binary),
                "-registry",
                str(self.node.directory / "kubelet" / "plugins_registry"),
                "-resource",
                resource,
                "-count",
                str(count),
                "-mount",
                f"{driver / 'libcuda.so.1'}:{DRIVER_DIR}/libcuda.so.1",
                "-mount",
                f"{driver / 'libnvidia-ml.so.1'}:{DRIVER_DIR}/libnvidia-ml.so.1",
                "-mount",
                f"{state}:{FAKE_GPU_DIR}:rw",
                "-env",
                f"SECUREML_FAKE_GPU_CONFIG={FAKE_GPU_DIR}/fakegpu.conf",
                "-env",  # the allocated devices (a MIG instance is visible to CUDA only so)
                f"CUDA_VISIBLE_DEVICES={','.join(visible)}",
            ],  # fmt: skip
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._processes.append((process, log))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise HarnessError(
                    f"fake-device-plugin for {resource} exited {process.returncode}: "
                    f"{(self.folder / f'{state.name}.log').read_text()[-2000:]}"
                )
            status, node = self.node.cluster.request("GET", f"/api/v1/nodes/{self.node.name}")
            if status == 200 and node["status"].get("allocatable", {}).get(resource) == str(count):
                return
            time.sleep(0.2)
        raise HarnessError(f"the node did not advertise {resource} in time")

    def __enter__(self) -> FakeGpuPlugins:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for process, log in self._processes:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
