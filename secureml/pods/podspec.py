"""Pod API field names that several layers walk: the lists a pod's containers live in."""

from __future__ import annotations

# Every container list, in the order the API server's pod-security visitor walks them
# (init, regular, ephemeral).
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# The lists a pod is created with and that admission may mutate: ephemeral containers are only
# ever added later, through the `ephemeralcontainers` subresource.
CREATED_CONTAINER_LISTS = ("containers", "initContainers")
