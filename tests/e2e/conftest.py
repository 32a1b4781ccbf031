"""The `e2e` fixture (tests/e2e/environment.py says what it runs): session-scoped, one per test
process. Where the node cannot run here (no root, Go, a Debian package, buildah) it skips saying
why, except under CI=true, where it fails; a start failure once everything is there fails
everywhere."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.environment import E2E, requirements, running_e2e
from tests.harness.controlplane import HarnessError


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def e2e(
    docker_registry: str,
    built_images: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[E2E]:
    try:
        requirements()
    except HarnessError as error:
        _fail_or_skip(f"no end-to-end node: {error}")
    with running_e2e(
        docker_registry,
        built_images.step.reference,
        built_images.runtime.reference,
        tmp_path_factory.mktemp("e2e"),
    ) as environment:
        yield environment
