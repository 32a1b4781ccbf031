"""Fixtures shared by the whole suite: the fake GPU (tests/support/fakegpu.py).

`fake_gpu` is one fake A100 with 256 MiB of device memory. With SECUREML_TEST_REAL_GPU=1 on a
machine where `nvidia-smi` lists a GPU it is the real driver instead (`RealGPU`),
so tests that only use `.env()` run unchanged against real hardware.

`make_fake_gpu(**options)` builds a fake with any configuration (`FakeGPU` keyword arguments); each
call gets its own folder, so its device memory and allocations are its own.

`k8s_cluster` (session-scoped) is a real kube-apiserver v1.36 + etcd on loopback with the real CRDs
(tests/harness/controlplane.py; under xdist each worker starts its own); `own_k8s_cluster` is one
per test module, for tests that must not share. Every test that uses either is marked `cluster`,
so `-m "not cluster"` runs only the fast tests. Where Go (and so the harness) is
missing it skips saying so, except under CI=true, where it fails: CI must test against the server.

`spire` (session-scoped) is a real spire-server + spire-agent v1.13 on loopback (tests/harness/spire.py;
trust domain `acme.example`, the example profiles'), ready in under a second once built; its tests
are marked `spire` (`-m "not cluster and not spire"`: the fast tests only), and it skips or fails
like `k8s_cluster`.

The compiled-CEL cache (`secureml.rules.cel.cache`) of the run is a folder of its own (every
process of the run, xdist workers and the CLIs they start, shares it), not the user's.

`docker_registry` (session-scoped) is a real OCI registry, Debian's docker-registry, on loopback
(tests/support/docker_registry.py; plain HTTP); it skips where the package is not installed.

`built_images` (session-scoped) is the images of images/ built for real and pushed to that registry
(tests/support/step_images.py); `rootfs_cache` is where their root filesystems are cached.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from secureml.images.context import cache_dir
from tests.harness.controlplane import ControlPlane
from tests.harness.spire import Spire, SpireError, build_spire, running_spire
from tests.support.control_planes import control_plane
from tests.support.docker_registry import INSTALL_HINT, REGISTRY_BIN, running_registry
from tests.support.fakegpu import FakeGPU, RealGPU, compiler, real_gpu_available
from tests.support.step_images import BuiltImages, built_images_once


def _require_compiler() -> None:
    if compiler() is None:
        pytest.skip("no C compiler: the fake GPU driver is built from C sources by the tests")


@pytest.fixture
def fake_gpu(tmp_path: Path) -> FakeGPU | RealGPU:
    if os.environ.get("SECUREML_TEST_REAL_GPU") == "1" and real_gpu_available():
        return RealGPU()
    _require_compiler()
    return FakeGPU(tmp_path / "fakegpu")


@pytest.fixture
def make_fake_gpu(tmp_path: Path) -> Callable[..., FakeGPU]:
    _require_compiler()
    count = 0

    def make(**options: object) -> FakeGPU:
        nonlocal count
        count += 1
        return FakeGPU(tmp_path / f"fakegpu{count}", **options)  # type: ignore[arg-type]

    return make


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[ControlPlane]:
    yield from control_plane()


@pytest.fixture(scope="module")
def own_k8s_cluster() -> Iterator[ControlPlane]:
    """A control plane of the test module's own, for tests whose objects would change what other
    modules see on the shared one (bundles of two tenants that share a namespace, say)."""
    yield from control_plane()


@pytest.fixture(scope="session")
def spire() -> Iterator[Spire]:
    try:
        bin_dir = build_spire()
    except SpireError as error:
        reason = f"no test SPIRE: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with running_spire(bin_dir) as running:  # a start failure is a failure everywhere
        yield running


@pytest.fixture(scope="session")
def docker_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real registry (Debian's docker-registry, tests/support/docker_registry.py): its `host:port`."""
    if REGISTRY_BIN is None:
        pytest.skip(INSTALL_HINT)
    with running_registry(tmp_path_factory.mktemp("registry")) as host:
        yield host


@pytest.fixture(scope="session")
def built_images(docker_registry: str) -> BuiltImages:
    return built_images_once(docker_registry)


@pytest.fixture(scope="session")
def rootfs_cache() -> Path:
    return cache_dir() / "rootfs-images"


_RUN_CACHE: list[str] = []  # the run's cache folder, where this process made it


def pytest_configure(config: pytest.Config) -> None:
    if "SECUREML_CACHE_DIR" not in os.environ:  # (xdist workers inherit the controller's)
        _RUN_CACHE.append(tempfile.mkdtemp(prefix="secureml-test-cache-"))
        os.environ["SECUREML_CACHE_DIR"] = _RUN_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _RUN_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"k8s_cluster", "own_k8s_cluster"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
        if "spire" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spire)
