"""An image's ENTRYPOINT and CMD, read from its config in the registry (`--resolve-entrypoints`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import requests

from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.registry import (
    OCI_INDEX,
    OCI_MANIFEST,
    _api_host,
    _expect_ok,
    _FastRegistry,
    _is_local,
)

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
_ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
PLATFORM = {"os": "linux", "architecture": "amd64"}  # what KFP's nodes run


@dataclass(frozen=True, slots=True)
class ImageProcess:
    """What a container of the image runs when the pod gives no command: ENTRYPOINT and CMD."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]


def image_process(image: str) -> ImageProcess:
    """The ENTRYPOINT and CMD of `image` (which must be pinned by digest), from its registry."""
    ref = ImageRef.parse(image)
    if ref.digest is None:
        raise InputError(
            f"image {image} is not pinned by digest, so its ENTRYPOINT can change",
            why="the launcher is put in front of the entrypoint read at compile time; a tag can "
            "later name an image with another one",
            fix="pin the image (REPOSITORY@sha256:<digest>), or give the component a command",
        )
    host = _api_host(ref.registry)
    local = _is_local(ref.registry)
    client = _FastRegistry(hostname=host, insecure=local)
    client.auth.load_configs(client.get_container(f"{host}/{ref.repository}@{ref.digest}"))
    base = f"{'http' if local else 'https'}://{host}/v2/{ref.repository}"
    try:
        manifest = _manifest(client, base, ref, ref.digest)
        if manifest.get("mediaType") in (OCI_INDEX, DOCKER_LIST) or "manifests" in manifest:
            manifest = _manifest(client, base, ref, _platform_digest(manifest, ref))
        config_digest = str(manifest["config"]["digest"])
        response = client.do_request(f"{base}/blobs/{config_digest}")
        _expect_ok(response, "image config")
        _check_digest(response.content, config_digest, ref)
        config = json.loads(response.content).get("config") or {}
    except requests.RequestException as err:
        raise InputError(
            f"cannot read the ENTRYPOINT of {ref.name}@{ref.digest}",
            why=f"registry {host} did not answer: {type(err).__name__}: {err}".splitlines()[0],
            fix="check network access and credentials (docker login), or give the component a "
            "command",
        ) from None
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputError(
            f"the registry's manifest or config of {ref.name}@{ref.digest} is not an image's",
            fix="give the component an explicit command",
        ) from None
    return ImageProcess(
        entrypoint=tuple(str(a) for a in config.get("Entrypoint") or ()),
        cmd=tuple(str(a) for a in config.get("Cmd") or ()),
    )


def _manifest(client: _FastRegistry, base: str, ref: ImageRef, digest: str) -> dict[str, Any]:
    response = client.do_request(f"{base}/manifests/{digest}", headers={"Accept": _ACCEPT})
    _expect_ok(response, "image manifest")
    _check_digest(response.content, digest, ref)
    document: dict[str, Any] = json.loads(response.content)
    return document


def _check_digest(content: bytes, digest: str, ref: ImageRef) -> None:
    if digest != "sha256:" + hashlib.sha256(content).hexdigest():
        raise InputError(
            f"the registry answered for {ref.name}@{ref.digest} with a document that does not "
            f"match its digest {digest}",
            why="a digest-pinned image's manifest and config are content-addressed",
            fix="check the registry (or a proxy in between); give the component a command",
        )


def _platform_digest(index: dict[str, Any], ref: ImageRef) -> str:
    for entry in index.get("manifests", []):
        platform = entry.get("platform") or {}
        if all(platform.get(key) == value for key, value in PLATFORM.items()):
            return str(entry["digest"])
    raise InputError(
        f"image {ref.name}@{ref.digest} has no linux/amd64 manifest",
        fix="pin the digest of the platform's own manifest, or give the component a command",
    )
