"""The Kubernetes minor versions secureml targets, in one place."""

from __future__ import annotations

from typing import Literal

K8sVersion = Literal["1.34", "1.35", "1.36", "1.37"]
K8S_VERSIONS: tuple[K8sVersion, ...] = ("1.34", "1.35", "1.36", "1.37")
# The version of the test suite's real API server (tests/harness), and the bundle's default.
DEFAULT_K8S_VERSION: K8sVersion = "1.36"


def at_least(version: str, minimum: str) -> bool:
    """`version` is `minimum` or newer (both "major.minor")."""
    return tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))
