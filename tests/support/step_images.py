"""The images of images/, built for real (the `built_images` fixture of tests/conftest.py).

buildah (`--isolation chroot`, no daemon) builds the platform runtime image and the `runtime`
step base image FROM a Debian made by debootstrap (cached under ~/.cache/secureml/images), then
pushes both to the session's docker-registry. Layers, the root filesystem and the wheels are
cached, so a second session rebuilds nothing. Needs root, buildah, debootstrap and bubblewrap
(.ci/run installs them); elsewhere the tests skip saying which is missing, except under CI=true.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass

import pytest

from secureml.core.image_ref import ImageRef
from secureml.images import builders, debian, platform
from secureml.images.context import cache_dir

TOOLS = ("buildah", "debootstrap", "bwrap")


@dataclass(frozen=True)
class BuiltImages:
    registry: str
    runtime: platform.BuiltImage  # the platform runtime image (images/runtime-injector)
    step: platform.BuiltImage  # the `runtime` step base image
    seconds: float


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    reason = None
    if missing:
        reason = f"{', '.join(missing)} not installed (Debian: apt-get install buildah debootstrap bubblewrap)"
    elif os.geteuid() != 0:
        reason = "building the Debian base image needs root (debootstrap, buildah mount)"
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def build_images(docker_registry: str) -> BuiltImages:
    started = time.monotonic()
    builder = builders.find_builder("buildah")
    base = debian.base_image()
    runtime = platform.build(
        "runtime-injector",
        builder,
        base=base,
        push_to=ImageRef.parse(f"{docker_registry}/platform/secureml-runtime:test"),
        compress=False,  # a registry on this machine: gzip would only cost time
    )
    step = platform.build(
        "runtime",
        builder,
        base=base,
        push_to=ImageRef.parse(f"{docker_registry}/acme/ml-images/train:test"),
        compress=False,
    )
    seconds = time.monotonic() - started
    print(
        f"\nimages built in {seconds:.0f}s (runtime-injector {runtime.seconds}s, runtime {step.seconds}s)"
    )
    return BuiltImages(docker_registry, runtime, step, seconds)


def built_images_once(docker_registry: str) -> BuiltImages:
    """The images, built (or taken from the caches) by one process of this machine at a time."""
    require_tools()
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per machine (xdist, other runs)
        return build_images(docker_registry)
