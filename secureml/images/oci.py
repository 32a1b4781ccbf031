"""Read an image's manifest, config and files from a registry or an OCI layout (docs/images.md)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from secureml.core.errors import InputError, NetworkError
from secureml.core.image_ref import ImageRef

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
PLATFORM = {"os": "linux", "architecture": "amd64"}
# The largest file whose content is kept (the checks read small text files only).
_MAX_KEPT = 1 << 20
_FIX = "pass REGISTRY/REPOSITORY@sha256:<digest> or oci:DIR[@sha256:<digest>]"


def _digest(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


@dataclass
class Entry:
    kind: str  # "file", "dir", "link" (symbolic), "hardlink", "other"
    mode: int
    uid: int
    gid: int
    target: str = ""  # a link's target
    content: bytes | None = None  # kept for wanted paths only


@dataclass
class ImageFiles:
    """The image's root filesystem as its layers leave it."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def resolve(self, path: str, depth: int = 0) -> str | None:
        """`path` with every symbolic link followed inside the image; None when it is missing.
        A folder that no layer lists but that holds listed paths counts as present."""
        if depth > 40:
            return None
        parts = [p for p in posixpath.normpath("/" + path).split("/") if p]
        current = "/"
        for index, part in enumerate(parts):
            candidate = posixpath.join(current, part)
            entry = self.entries.get(candidate)
            if entry is not None and entry.kind == "link":
                base = posixpath.dirname(candidate)
                joined = posixpath.normpath(posixpath.join(base, entry.target))
                rest = "/".join(parts[index + 1 :])
                return self.resolve(posixpath.join(joined, rest) if rest else joined, depth + 1)
            current = candidate
        return current if current in self.entries or self._holds(current) else None

    def _holds(self, folder: str) -> bool:
        prefix = folder.rstrip("/") + "/"
        return any(p.startswith(prefix) for p in self.entries)

    def get(self, path: str) -> Entry | None:
        resolved = self.resolve(path)
        return None if resolved is None else self.entries.get(resolved)

    def read(self, path: str) -> bytes | None:
        entry = self.get(path)
        return None if entry is None else entry.content


@dataclass
class Image:
    reference: str
    digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    files: ImageFiles

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.config.get("config") or {}).get("Labels") or {})

    @property
    def runtime_config(self) -> dict[str, Any]:
        return dict(self.config.get("config") or {})


class _Source:
    def manifest(self, reference: str) -> bytes:
        raise NotImplementedError

    def blob(self, digest: str) -> bytes:
        raise NotImplementedError


class _Registry(_Source):
    def __init__(self, ref: ImageRef) -> None:
        from secureml.supplychain.registry import _api_host, _FastRegistry, _is_local

        self.ref = ref
        host = _api_host(ref.registry)
        local = _is_local(ref.registry)
        self.client = _FastRegistry(hostname=host, insecure=local)
        self.client.auth.load_configs(self.client.get_container(f"{host}/{ref.repository}"))
        self.base = f"{'http' if local else 'https'}://{host}/v2/{ref.repository}"

    def _get(self, url: str, accept: str) -> bytes:
        try:
            response = self.client.do_request(url, headers={"Accept": accept})
        except requests.RequestException as err:
            raise NetworkError(
                f"cannot read {self.ref.name} from its registry",
                why=f"{type(err).__name__}: {err}".splitlines()[0],
                fix="check network access and credentials (docker login)",
            ) from None
        if response.status_code != 200:
            raise InputError(
                f"cannot read {self.ref.name} from its registry",
                why=f"GET {url} answered HTTP {response.status_code}",
                fix="check the reference and the credentials (docker login)",
            )
        return bytes(response.content)

    def manifest(self, reference: str) -> bytes:
        return self._get(f"{self.base}/manifests/{reference}", ACCEPT)

    def blob(self, digest: str) -> bytes:
        return self._get(f"{self.base}/blobs/{digest}", "*/*")


class _Layout(_Source):
    def __init__(self, root: Path) -> None:
        if not (root / "index.json").is_file():
            raise InputError(
                f"{root} is not an OCI image layout", why="it has no index.json", fix=_FIX
            )
        self.root = root

    def manifest(self, reference: str) -> bytes:
        return self.blob(reference)

    def blob(self, digest: str) -> bytes:
        algorithm, _, hexdigest = digest.partition(":")
        path = self.root / "blobs" / algorithm / hexdigest
        if not path.is_file():
            raise InputError(f"blob {digest} is missing from {self.root}", why="", fix=_FIX)
        return path.read_bytes()

    def index(self) -> dict[str, Any]:
        return dict(json.loads((self.root / "index.json").read_text()))


def _checked(content: bytes, digest: str, what: str) -> bytes:
    if _digest(content) != digest:
        raise InputError(
            f"the {what} does not match its digest {digest}",
            why="the registry or layout returned other content than the digest names",
            fix="do not use this image; rebuild and push it",
        )
    return content


def _pick_platform(index: dict[str, Any], where: str) -> str:
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        if all(platform.get(k) == v for k, v in PLATFORM.items()):
            return str(entry["digest"])
    raise InputError(
        f"{where} has no linux/amd64 image", why="the image index lists other platforms", fix=_FIX
    )


def _resolve_manifest(source: _Source, digest: str, where: str) -> tuple[str, dict[str, Any]]:
    raw = _checked(source.manifest(digest), digest, "manifest")
    manifest = json.loads(raw)
    if manifest.get("mediaType") in (OCI_INDEX, DOCKER_LIST) or "manifests" in manifest:
        chosen = _pick_platform(manifest, where)
        raw = _checked(source.manifest(chosen), chosen, "manifest")
        manifest = json.loads(raw)
    return digest, manifest


def open_image(reference: str, wanted: Callable[[str], bool] = lambda path: False) -> Image:
    """Read `reference` (pinned by digest, or an OCI layout); keep the content of the files
    `wanted` says yes to (small ones only)."""
    source: _Source
    if reference.startswith("oci:"):
        layout, digest = _layout_reference(reference[4:])
        source = layout
    else:
        ref = ImageRef.parse(reference)
        if ref.digest is None:
            raise InputError(
                f"image {reference} is not pinned by digest",
                why="an image is checked by the digest a step will run",
                fix=_FIX,
            )
        source = _Registry(ref)
        digest = ref.digest
    _, manifest = _resolve_manifest(source, digest, reference)
    config_digest = manifest["config"]["digest"]
    config = json.loads(_checked(source.blob(config_digest), config_digest, "image config"))
    files = ImageFiles()
    for layer in manifest.get("layers") or []:
        blob = _checked(source.blob(layer["digest"]), layer["digest"], "layer")
        _apply_layer(files, _layer_tar(blob, str(layer.get("mediaType", ""))), wanted)
    return Image(reference, digest, manifest, config, files)


def _layout_reference(text: str) -> tuple[_Layout, str]:
    path, _, digest = text.partition("@")
    tag = None
    if not digest and ":" in Path(path).name:
        path, _, tag = path.rpartition(":")
    layout = _Layout(Path(path))
    if digest:
        return layout, digest
    manifests = layout.index().get("manifests") or []
    if tag is not None:
        manifests = [
            m
            for m in manifests
            if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag
        ]
    if len(manifests) != 1:
        raise InputError(
            f"the layout {path} holds {len(manifests)} images matching {text!r}",
            why="an image is checked by its digest",
            fix="write oci:DIR@sha256:<digest> or oci:DIR:TAG",
        )
    return layout, str(manifests[0]["digest"])


def _layer_tar(blob: bytes, media_type: str) -> tarfile.TarFile:
    if "zstd" in media_type:
        raise InputError(
            "zstd-compressed layers cannot be read here",
            why=f"layer media type {media_type}",
            fix="push the image with gzip layers (buildah push --compression-format gzip)",
        )
    data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:")


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := archive.next()) is not None:
        yield member


def _apply_layer(
    files: ImageFiles, archive: tarfile.TarFile, wanted: Callable[[str], bool]
) -> None:
    for member in _members(archive):
        path = posixpath.normpath("/" + member.name)
        base = posixpath.basename(path)
        parent = posixpath.dirname(path)
        if base == ".wh..wh..opq":
            for existing in [p for p in files.entries if p.startswith(parent.rstrip("/") + "/")]:
                del files.entries[existing]
            continue
        if base.startswith(".wh."):
            gone = posixpath.join(parent, base[4:])
            for existing in [p for p in files.entries if p == gone or p.startswith(gone + "/")]:
                del files.entries[existing]
            continue
        if member.isdir():
            kind = "dir"
        elif member.issym():
            kind = "link"
        elif member.islnk():
            kind = "hardlink"
        elif member.isreg():
            kind = "file"
        else:
            kind = "other"
        entry = Entry(kind, member.mode, member.uid, member.gid, member.linkname)
        if kind == "hardlink":
            linked = files.entries.get(posixpath.normpath("/" + member.linkname))
            if linked is not None:
                entry = Entry("file", linked.mode, linked.uid, linked.gid, content=linked.content)
        if kind == "file" and member.size <= _MAX_KEPT and wanted(path):
            extracted = archive.extractfile(member)
            entry.content = extracted.read() if extracted is not None else None
        files.entries[path] = entry
