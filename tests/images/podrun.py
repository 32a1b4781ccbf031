"""Run a previewed step pod's containers the way the kubelet would, with bubblewrap (no runtime).

`install_runtime` plays the init container `secureml-runtime`: the runtime image's root
filesystem as `/`, an empty folder at RUNTIME_DIR, its command `RUNTIME_INSTALL_COMMAND` run as uid
1000. `run_main` plays `main`: the step image's root filesystem read-only at `/`, a new PID (and
IPC, UTS) namespace, every volume mount of the pod at its path (emptyDirs as fresh folders,
the downward-API files rendered from the pod's metadata as the kubelet writes them, subPath
items as single files, the runtime volume read-only, the SPIFFE CSI volume as the folder of a
Workload API socket), the fake GPU's libraries where the NVIDIA container runtime puts the
driver's (/usr/lib/x86_64-linux-gnu) with its state at FAKE_GPU_DIR, and the container's securityContext: its uid/gid through
`setpriv` with every capability dropped (bounding set included) and no_new_privs. The argv is what
comes after KFP's own launcher (`/kfp-launcher/launch ... --`), which is KFP's and not run here;
its `{{$}}` placeholder gets the executor input KFP would pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secureml.core import contract

BWRAP = shutil.which("bwrap")
BUILDAH = shutil.which("buildah")
DRIVER_DIR = "/usr/lib/x86_64-linux-gnu"  # where the NVIDIA runtime mounts libcuda/libnvidia-ml
FAKE_GPU_DIR = "/var/lib/fake-gpu"  # the fake machine's state (its "device memory"), shared


def image_rootfs(tag: str, cache: Path) -> Path:
    """A private copy of the image's root filesystem (cached per image id), mount points added
    by the caller as a container runtime would."""
    assert BUILDAH is not None
    image_id = subprocess.run(
        [BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    target = cache / image_id[:20]
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=cache))
    container = subprocess.run(
        [BUILDAH, "from", tag], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        mount = subprocess.run(
            [BUILDAH, "mount", container], check=True, capture_output=True, text=True
        ).stdout.strip()
        subprocess.run(["cp", "-a", f"{mount}/.", str(staging)], check=True)
    finally:
        subprocess.run([BUILDAH, "rm", container], capture_output=True)
    try:
        staging.rename(target)
    except OSError:  # another process copied the same image first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def inside(rootfs: Path, path: str, depth: int = 0) -> Path:
    """`path` of the image as a host path under `rootfs`, its symbolic links (absolute ones
    too, like Debian's /var/run -> /run) followed inside the image, never out of it."""
    assert depth < 40, f"symbolic link loop at {path}"
    current = rootfs
    parts = [p for p in path.split("/") if p and p != "."]
    for index, part in enumerate(parts):
        if part == "..":
            current = current.parent if current != rootfs else rootfs
            continue
        candidate = current / part
        if candidate.is_symlink():
            target = os.readlink(candidate)
            if not target.startswith("/"):
                target = f"/{current.relative_to(rootfs)}/{target}"
            return inside(rootfs, "/".join([target, *parts[index + 1 :]]), depth + 1)
        current = candidate
    return current


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)


def _init(pod: dict[str, Any]) -> dict[str, Any]:
    return next(
        c for c in pod["spec"]["initContainers"] if c["name"] == contract.RUNTIME_INIT_CONTAINER
    )


def _downward(pod: dict[str, Any], field_path: str) -> str:
    metadata = pod["metadata"]
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = metadata.get(field_path.split(".")[1], {})
        return "\n".join(f"{k}={json.dumps(v)}" for k, v in sorted(values.items()))
    if field_path.startswith("metadata.annotations['"):
        return str(
            metadata.get("annotations", {}).get(field_path[len("metadata.annotations['") : -2], "")
        )
    if field_path.startswith("metadata.labels['"):
        return str(metadata.get("labels", {}).get(field_path[len("metadata.labels['") : -2], ""))
    if field_path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(metadata.get(field_path.split(".")[1], "pod-uid"))
    raise AssertionError(f"unknown downward-API field {field_path}")


def step_argv(pod: dict[str, Any]) -> list[str]:
    """main's argv after KFP's launcher: the injected launcher and the step's command."""
    main = _main(pod)
    argv = [*main.get("command", []), *main.get("args", [])]
    start = argv.index(contract.KFP_LAUNCHER_BINARY)
    return argv[argv.index("--", start) + 1 :]


def step_env(pod: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in _main(pod).get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in item.get("valueFrom", {}):
            env[item["name"]] = _downward(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
    return env


@dataclass
class Sandbox:
    """What a run needs beyond the pod: root filesystems and the node's parts."""

    step_rootfs: Path
    runtime_dir: Path  # filled by install_runtime
    work: Path  # the pod's emptyDirs and downward-API files live here
    fake_gpu_libs: Path | None = None  # folder with libcuda.so.1 and libnvidia-ml.so.1
    fake_gpu_dir: Path | None = None  # the fake machine's state, at FAKE_GPU_DIR inside
    spiffe_dir: Path | None = None  # the folder of the Workload API socket (the CSI volume)


def install_runtime(pod: dict[str, Any], runtime_rootfs: Path, dest: Path) -> str:
    """The init container: copy the runtime image's payload into `dest` (the emptyDir)."""
    assert BWRAP is not None
    init = _init(pod)
    dest.mkdir(parents=True, exist_ok=True)
    for point in ("proc", "dev", contract.RUNTIME_DIR.lstrip("/")):
        (runtime_rootfs / point).mkdir(parents=True, exist_ok=True)
    user = init["securityContext"]
    result = subprocess.run(
        [
            BWRAP,
            "--ro-bind",
            str(runtime_rootfs),
            "/",
            "--bind",
            str(dest),
            contract.RUNTIME_DIR,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--unshare-pid",
            "--unshare-user",
            "--uid",
            str(user["runAsUser"]),
            "--gid",
            str(user["runAsGroup"]),
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--",
            *init["command"],
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _mount_args(pod: dict[str, Any], box: Sandbox) -> list[str]:
    """bwrap arguments for main's volume mounts (mount points made in the private rootfs)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    args: list[str] = []
    for mount in _main(pod)["volumeMounts"]:
        volume = volumes[mount["name"]]
        path = mount["mountPath"]
        read_only = bool(mount.get("readOnly"))
        if "downwardAPI" in volume:
            folder = box.work / "downward" / mount["name"]
            if not folder.exists():
                folder.mkdir(parents=True)
                for item in volume["downwardAPI"]["items"]:
                    (folder / item["path"]).write_text(
                        _downward(pod, item["fieldRef"]["fieldPath"])
                    )
            source = folder / mount["subPath"] if mount.get("subPath") else folder
        elif mount["name"] == contract.RUNTIME_VOLUME:
            source = box.runtime_dir
        elif "csi" in volume:
            assert box.spiffe_dir is not None, "the pod mounts the SPIFFE CSI volume"
            source = box.spiffe_dir
        elif "emptyDir" in volume:
            source = box.work / "emptydir" / mount["name"]
            source.mkdir(parents=True, exist_ok=True)
            shutil.chown(source, 1000, 1000)
        else:
            raise AssertionError(f"no stand-in for volume {volume}")
        target = inside(box.step_rootfs, path)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)
        args += ["--ro-bind" if read_only else "--bind", str(source), _canonical(box, target)]
    return args


def _canonical(box: Sandbox, target: Path) -> str:
    """The path bwrap mounts at: inside the image, with its links resolved (bwrap would follow an
    absolute link of the image on the host)."""
    return "/" + str(target.relative_to(box.step_rootfs))


def _gpu_args(box: Sandbox) -> list[str]:
    if box.fake_gpu_libs is None or box.fake_gpu_dir is None:
        return []
    args = []
    driver = box.work / "driver"  # world-readable copies, as a node's driver libraries are
    driver.mkdir(exist_ok=True)
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        shutil.copy(box.fake_gpu_libs / name, driver / name)
        (driver / name).chmod(0o755)
        target = inside(box.step_rootfs, f"{DRIVER_DIR}/{name}")
        target.touch(exist_ok=True)
        args += ["--ro-bind", str(driver / name), _canonical(box, target)]
    state = inside(box.step_rootfs, FAKE_GPU_DIR)
    state.mkdir(parents=True, exist_ok=True)
    return [*args, "--bind", str(box.fake_gpu_dir), _canonical(box, state)]


def run_main(
    pod: dict[str, Any],
    box: Sandbox,
    argv: Sequence[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` as main's process: the pod's env (plus `extra_env`), mounts and security."""
    assert BWRAP is not None
    security = _main(pod)["securityContext"]
    assert security.get("readOnlyRootFilesystem") is True
    assert security["capabilities"]["drop"] == ["ALL"]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    env |= step_env(pod) | dict(extra_env or {})
    env_args = [arg for key, value in env.items() for arg in ("--setenv", key, value)]
    command = [
        BWRAP,
        "--ro-bind", str(box.step_rootfs), "/",
        "--dev", "/dev",
        "--tmpfs", "/dev/shm",
        "--proc", "/proc",
        *_mount_args(pod, box),
        *_gpu_args(box),
        "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--die-with-parent",
        "--clearenv", *env_args,
        "--chdir", "/",
        "--",
        "/usr/bin/setpriv",
        "--reuid", str(security["runAsUser"]),
        "--regid", str(security["runAsGroup"]),
        "--clear-groups",
        "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all",
        "--no-new-privs",
        "--",
        *argv,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def audit_record(stderr: str) -> dict[str, Any]:
    lines = [ln for ln in stderr.splitlines() if ln.startswith(contract.AUDIT_LINE_PREFIX)]
    assert len(lines) == 1, stderr
    record: dict[str, Any] = json.loads(lines[0][len(contract.AUDIT_LINE_PREFIX) :])
    return record
