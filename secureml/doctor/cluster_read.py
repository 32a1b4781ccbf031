"""Read-only access to the cluster for `doctor cluster`: an absent object or API is an answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from secureml.cluster.connection import Cluster, Resource, ServerRefusedError


@dataclass(frozen=True)
class Found:
    """A rendered object's place on the cluster: whether its kind is served, the stored object."""

    served: bool
    stored: dict[str, Any] | None


class Reader:
    """GETs against one cluster, with 404 and unserved APIs as "absent"."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.cluster.get(path)
        except ServerRefusedError as refusal:
            if refusal.code == 404:
                return None
            raise self.cluster.unusable(f"GET {path}", refusal) from None

    def items(
        self, api_version: str, kind: str, query: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]] | None:
        """Every `kind` object of `api_version` in all namespaces; None when the kind is not served."""
        resource = self.resource(api_version, kind)
        if resource is None:
            return None
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        path = f"{base}/{resource.name}"
        try:
            listing = self.cluster.request("GET", path, query=query).body
        except ServerRefusedError as refusal:
            if refusal.code == 404:
                return None
            raise self.cluster.unusable(f"GET {path}", refusal) from None
        return [item for item in listing.get("items") or [] if isinstance(item, dict)]

    def resource(self, api_version: str, kind: str) -> Resource | None:
        return (self.cluster.served(api_version) or {}).get(kind)

    def find(self, obj: Mapping[str, Any]) -> Found:
        """The stored copy of a manifest (by apiVersion, kind, namespace and name)."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        if resource is None:
            return Found(served=False, stored=None)
        meta = obj.get("metadata") or {}
        path = self.cluster.object_path(obj["apiVersion"], resource, meta.get("namespace"))
        return Found(served=True, stored=self.get(f"{path}/{meta['name']}"))
