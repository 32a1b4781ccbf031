"""The images of KFP's and Argo's own containers in a step pod, under their real names.

A compiled step pod (`secureml.pods.preview`) names, besides the step's image and the platform's
runtime image, `quay.io/argoproj/argoexec:v4.0.5` (Argo's `init` and `wait` containers, and the
emissary that starts `main`) and `ghcr.io/kubeflow/kfp-launcher:2.17.0` (the init container that
copies KFP's launcher to `/kfp-launcher/launch`). Here:

- `argoexec` is Argo's own, built from its Go module (`tests/harness/build.sh e2e`, the
  version in tests/harness/e2e/go.mod; the module zip's dropped `signal_linux.go` symlink
  restored at build time);
- `kfp-launcher` is a STAND-IN (tests/harness/e2e/kfp-launcher-standin): KFP's launcher
  cannot be built here, the Go module proxy refuses the `github.com/kubeflow/pipelines` root
  module. The stand-in copies itself like `launcher-v2 --copy`, and as `launch` fills `{{$}}` with
  the executor input, moves artifacts through a plain HTTP store (`standinStore` in the
  namespace's `kfp-launcher` ConfigMap) and runs the command after `--`;
- `kfp-driver` (`ghcr.io/kubeflow/kfp-driver:2.17.0`, the image of the driver pods of a KFP
  Workflow, tests/harness/kfp_workflow.py) is a STAND-IN too (tests/harness/e2e/kfp-driver-standin),
  for the same reason: it takes KFP 2.17 driver's command line and writes the outputs the
  Workflow's templates read, the pod spec patch being the one a test published in that store.
  Its image holds an empty `/tmp` (mode 1777) for those outputs (`/tmp/outputs/...`).

`push_kfp_images(registry)` builds the three with buildah (`FROM scratch`, `--isolation chroot`)
and pushes them to `registry` under the upstream repository paths (`argoproj/argoexec`,
`kubeflow/kfp-launcher`, `kubeflow/kfp-driver`); `mirror_kfp_registries(node, registry)` makes the node's containerd pull
`quay.io/...` and `ghcr.io/...` from there, as a platform's pull-through mirror does, so the pods
keep KFP's and Argo's image names exactly and are pulled like any other image (never
`imagePullPolicy: Never`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .built import built
from .controlplane import HarnessError
from .node import Node

HERE = Path(__file__).resolve().parent
ARGOEXEC_IMAGE = "quay.io/argoproj/argoexec:v4.0.5"  # secureml.pods.argo.ARGOEXEC_IMAGE
KFP_LAUNCHER_IMAGE = "ghcr.io/kubeflow/kfp-launcher:2.17.0"  # secureml.pods.preview
KFP_DRIVER_IMAGE = "ghcr.io/kubeflow/kfp-driver:2.17.0"  # secureml.pods.preview
BUILT = (
    "argoexec",
    "workflow-controller",
    "kfp-launcher-standin",
    "kfp-driver-standin",
    "fake-device-plugin",
)
NONROOT = "65532"  # the images' USER: KFP's init container sets runAsNonRoot without a uid

CONTAINERFILES = {
    ARGOEXEC_IMAGE: f"""FROM scratch
COPY argoexec /bin/argoexec
ENV PATH=/bin
USER {NONROOT}
ENTRYPOINT ["argoexec"]
""",
    KFP_LAUNCHER_IMAGE: f"""FROM scratch
LABEL org.opencontainers.image.description="STAND-IN for KFP's launcher (tests/harness/kfp_images.py)"
COPY kfp-launcher-standin /bin/launcher-v2
ENV PATH=/bin
USER {NONROOT}
""",
    KFP_DRIVER_IMAGE: f"""FROM scratch
LABEL org.opencontainers.image.description="STAND-IN for KFP's driver (tests/harness/kfp_images.py)"
COPY kfp-driver-standin /bin/driver
ADD tmp.tar /
ENV PATH=/bin
USER {NONROOT}
""",
}
SOURCES = {
    ARGOEXEC_IMAGE: "argoexec",
    KFP_LAUNCHER_IMAGE: "kfp-launcher-standin",
    KFP_DRIVER_IMAGE: "kfp-driver-standin",
}


@dataclass(frozen=True)
class KfpImages:
    """The images pushed: upstream name -> `registry/path@sha256:...` in the local registry."""

    registry: str
    pushed: dict[str, str]


def _cache() -> Path:
    cache = Path(os.environ.get("SECUREML_HARNESS_CACHE", Path.home() / ".cache/secureml/harness"))
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def binaries() -> Path:
    """The folder holding BUILT (`build.sh e2e`, built once per machine)."""
    return built("e2e", BUILT)


def upstream_path(image: str) -> str:
    """`quay.io/argoproj/argoexec:v4.0.5` -> `argoproj/argoexec:v4.0.5` (the mirror's path)."""
    return image.split("/", 1)[1]


def push_kfp_images(registry: str) -> KfpImages:
    """Build argoexec's and the stand-in launcher's images, push them to `registry`."""
    folder = binaries()
    pushed = {}
    with (_cache() / ".e2e-images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # buildah's tags: one build at a time per machine
        for image, containerfile in CONTAINERFILES.items():
            with tempfile.TemporaryDirectory(prefix="kfp-image-", dir="/var/tmp") as context:
                shutil.copy(folder / SOURCES[image], Path(context) / SOURCES[image])
                (Path(context) / "Containerfile").write_text(containerfile)
                _empty_tmp(Path(context) / "tmp.tar")
                pushed[image] = _build_and_push(Path(context), image, registry)
    return KfpImages(registry, pushed)


def _empty_tmp(path: Path) -> None:
    """A tar of an empty `tmp/` (root, mode 1777): `ADD` unpacks it with its mode, COPY would not."""
    with tarfile.open(path, "w") as archive:
        entry = tarfile.TarInfo("tmp")
        entry.type, entry.mode = tarfile.DIRTYPE, 0o1777
        archive.addfile(entry)


def _build_and_push(context: Path, image: str, registry: str) -> str:
    tag = f"localhost/secureml-test/{upstream_path(image)}"
    _run(
        ["buildah", "build", "--quiet", "--isolation", "chroot", "--timestamp", "0",
         "--format", "oci", "-t", tag, str(context)],
        f"building {image}",
    )  # fmt: skip
    digest_file = context / "digest"
    target = f"{registry}/{upstream_path(image)}"
    _run(
        ["buildah", "push", "--quiet", "--tls-verify=false", "--digestfile", str(digest_file),
         tag, f"docker://{target}"],
        f"pushing {image}",
    )  # fmt: skip
    return f"{target.rsplit(':', 1)[0]}@{digest_file.read_text().strip()}"


def mirror_kfp_registries(node: Node, registry: str) -> None:
    """The node's containerd pulls `quay.io/...` and `ghcr.io/...` from `registry`."""
    for image in CONTAINERFILES:
        node.mirror_registry(image.split("/", 1)[0], registry)


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
