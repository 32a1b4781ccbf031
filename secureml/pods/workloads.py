"""Pods out of Kubernetes manifests: Pods, and the pod templates of workload kinds."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from secureml.core import yaml_stream
from secureml.core.errors import InputError
from secureml.pods.podspec import CONTAINER_LISTS

STDIN = "-"

# Where each kind keeps its pod template.
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
_FIX = "give a Pod or a workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob)"


@dataclass(frozen=True, slots=True)
class PodObject:
    """One pod to judge: where it came from and the Pod-shaped object itself."""

    kind: str
    name: str
    namespace: str | None
    file: str
    doc_index: int
    pod: dict[str, Any]


def read_pods(paths: Iterable[str], stdin: TextIO | None = None) -> list[PodObject]:
    """Every pod in `paths`, in file and document order; `-` reads `stdin`. The pods are the
    caller's: no dict or list is shared with anything else, or between two places in them."""
    pods: list[PodObject] = []
    for path in paths:
        found = list(pods_in_text(_read(path, stdin), source=path))
        if not found:
            raise InputError(
                f"{path}: no Pod or workload with a pod template",
                why="check-pod judges the pods that objects create; other kinds are skipped",
                fix=_FIX,
            )
        pods.extend(found)
    return pods


def pods_in_text(text: str, *, source: str) -> Iterator[PodObject]:
    """The pods of every document of the YAML `text` (documents that are empty are skipped)."""
    try:
        documents = yaml_stream.load_all(text)
    except yaml_stream.YAMLError as err:  # (looked up only when something was raised)
        raise InputError(
            f"{source}: not valid YAML", why=str(err), fix="fix the YAML syntax"
        ) from None
    for index, document in enumerate(documents):
        if document is None:
            continue
        yield from pods_in_document(document, source=source, doc_index=index)


def pods_in_document(document: Any, *, source: str, doc_index: int) -> Iterator[PodObject]:
    """The pods of one parsed document (a `List` yields the pods of its items)."""
    where = f"{source}: document {doc_index}"
    if not isinstance(document, Mapping):
        raise InputError(f"{where}: expected a Kubernetes object (a mapping)", fix=_FIX)
    kind = document.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in document):
        items = document.get("items")
        if not isinstance(items, list):
            raise InputError(f"{where}: {kind} without an items list", fix=_FIX)
        for number, item in enumerate(items):
            yield from pods_in_document(
                item, source=f"{source}: items[{number}]", doc_index=doc_index
            )
        return
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}: the object has no kind", fix=_FIX)
    if kind not in TEMPLATE_PATHS:
        return  # a Service, ConfigMap, ... beside the workloads: it creates no pod
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InputError(f"{where}: metadata is not a mapping", fix="fix the object's metadata")
    template = _template(document, TEMPLATE_PATHS[kind], where)
    yield PodObject(
        kind=kind,
        name=str(metadata.get("name") or metadata.get("generateName") or ""),
        namespace=metadata.get("namespace"),
        file=source,
        doc_index=doc_index,
        pod=_as_pod(template, metadata, where),
    )


def _template(document: Mapping[str, Any], path: tuple[str, ...], where: str) -> Mapping[str, Any]:
    node = document
    for step, key in enumerate(path):
        child = node.get(key)
        if not isinstance(child, Mapping):
            dotted = ".".join(path[: step + 1])
            raise InputError(f"{where}: {dotted} is missing or not a mapping", fix=_FIX)
        node = child
    return node


def _as_pod(
    template: Mapping[str, Any], owner_metadata: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """The Pod the API server would judge: the template's metadata and spec."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError(f"{where}: the pod spec is missing or not a mapping", fix=_FIX)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InputError(f"{where}: spec.containers must be a non-empty list", fix=_FIX)
    for list_name in CONTAINER_LISTS:
        entries = spec.get(list_name)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise InputError(f"{where}: spec.{list_name} is not a list", fix=_FIX)
        for number, container in enumerate(entries):
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                raise InputError(
                    f"{where}: spec.{list_name}[{number}] is not a container with a name",
                    fix="every container needs a name and an image",
                )
    metadata = template.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InputError(f"{where}: the pod template's metadata is not a mapping", fix=_FIX)
    pod_metadata = dict(metadata)
    if "namespace" not in pod_metadata and owner_metadata.get("namespace"):
        pod_metadata["namespace"] = owner_metadata["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": dict(spec)}


def _read(path: str, stdin: TextIO | None) -> str:
    if path == STDIN:
        return (stdin or sys.stdin).read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", fix="check the path") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot be read", why=str(err)) from None
