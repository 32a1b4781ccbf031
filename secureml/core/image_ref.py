"""Container image references: parse, normalise, and match against allowed registries."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from secureml.core.errors import SecuremlError

DOCKER_HUB = "docker.io"
DOCKER_HUB_OFFICIAL = "library"
# Other spellings of Docker Hub that people write; they name the same registry.
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_HOST_LABEL = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST = rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\])"
_REGISTRY_RE = re.compile(rf"^{_HOST}(?::[0-9]{{1,5}})?$")
_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_MAX_NAME_LENGTH = 255

# What may follow a repository's name in a reference to it: `:` starts a tag, `@` a digest. A
# reference of repository R is R itself or R followed by one of these (a path component holds
# neither), so `R-debug`, `Rx` and `R/shell` are other repositories.
REFERENCE_SUFFIX_STARTS = (":", "@")

_FIX = "write the image as REGISTRY/REPOSITORY[:TAG]@sha256:<64 hex>, e.g. ghcr.io/acme/train@sha256:..."


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ImageRef:
    return ImageRef._parse(text)


def _looks_like_registry(component: str) -> bool:
    """The Docker rule: a first component names a host when it has a dot, a port, or is localhost."""
    return "." in component or ":" in component or component == "localhost"


def _normalise_registry(host: str) -> str:
    lowered = host.lower()
    return DOCKER_HUB if lowered in _DOCKER_HUB_ALIASES else lowered


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One normalised image reference. Build it with `ImageRef.parse`."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse `text` into a normalised reference; raise `SecuremlError` saying what is wrong.

        Each distinct text is parsed once (the compiler parses every step's image twice, and a
        pipeline's steps share a few images); a reference is frozen, an error is not kept."""
        return _parsed(text) if isinstance(text, str) else cls._parse(text)

    @classmethod
    def _parse(cls, text: str) -> ImageRef:
        if not isinstance(text, str) or not text.strip():
            raise SecuremlError("empty image reference", why="every step needs an image", fix=_FIX)
        if text != text.strip() or any(ch.isspace() for ch in text):
            raise SecuremlError(
                f"image reference {text!r} contains whitespace",
                why="a reference is one token; spaces usually mean a copy-paste error",
                fix=_FIX,
            )
        rest = text
        digest: str | None = None
        if "@" in rest:
            rest, digest = rest.split("@", 1)
            if not _DIGEST_RE.match(digest):
                raise SecuremlError(
                    f"image reference {text!r} has an invalid digest {digest!r}",
                    why="a digest must be 'sha256:' followed by exactly 64 lowercase hex digits",
                    fix="copy the digest from `crane digest IMAGE` or the registry's UI",
                )
        tag: str | None = None
        slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > slash:  # a colon after the last slash separates the tag (before it, a port)
            rest, tag = rest[:colon], rest[colon + 1 :]
            if not _TAG_RE.match(tag):
                raise SecuremlError(
                    f"image reference {text!r} has an invalid tag {tag!r}",
                    why="a tag is 1-128 characters of letters, digits, '_', '.', '-', "
                    "not starting with '.' or '-'",
                    fix=_FIX,
                )
        components = rest.split("/")
        if len(components) > 1 and _looks_like_registry(components[0]):
            registry_text, path = components[0], components[1:]
            if not _REGISTRY_RE.match(registry_text):
                raise SecuremlError(
                    f"image reference {text!r} has an invalid registry host {registry_text!r}",
                    why="a registry is a host name or [IPv6] address with an optional :port",
                    fix=_FIX,
                )
            registry = _normalise_registry(registry_text)
        else:
            registry, path = DOCKER_HUB, components
        if registry == DOCKER_HUB and len(path) == 1:
            path = [DOCKER_HUB_OFFICIAL, *path]
        for component in path:
            if not _PATH_COMPONENT_RE.match(component):
                why = (
                    "repository names are lowercase"
                    if component.lower() != component
                    else "each '/'-separated part is lowercase letters and digits, joined by "
                    "'.', '_', '__' or dashes, and may not be empty"
                )
                raise SecuremlError(
                    f"image reference {text!r} has an invalid repository part {component!r}",
                    why=why,
                    fix=_FIX,
                )
        repository = "/".join(path)
        if len(registry) + 1 + len(repository) > _MAX_NAME_LENGTH:
            raise SecuremlError(
                f"image reference {text!r} is too long",
                why=f"registry and repository together may have at most {_MAX_NAME_LENGTH} characters",
                fix="use a shorter repository name",
            )
        return cls(registry=registry, repository=repository, tag=tag, digest=digest)

    @property
    def name(self) -> str:
        """`registry/repository`, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def pinned(self) -> bool:
        """True when the reference names its content by digest (a tag may be present beside it)."""
        return self.digest is not None

    @property
    def digest_hex(self) -> str | None:
        """The 64 hex digits of the digest, without the `sha256:` prefix."""
        return self.digest.split(":", 1)[1] if self.digest else None

    def by_digest(self) -> str:
        """`registry/repository@sha256:...`: the form a runtime pulls, tag dropped."""
        if self.digest is None:
            raise SecuremlError(
                f"image {self} is not pinned by digest",
                why="a tag can be moved to other content after it was checked",
                fix="append @sha256:<digest> to the image reference",
            )
        return f"{self.name}@{self.digest}"

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def allowed_registry_problem(entry: str) -> str | None:
    """Why `entry` cannot be an allowed-registry prefix, or None when it can (for profile validation)."""
    segments = entry.strip().rstrip("/").split("/")
    if any(not part for part in segments) or not _looks_like_registry(segments[0]):
        return (
            f"{entry!r} does not start with a registry host; write it explicitly, "
            "e.g. 'docker.io/acme/' or 'ghcr.io/acme/'"
        )
    if not _REGISTRY_RE.match(segments[0]):
        return f"{entry!r} has an invalid registry host {segments[0]!r}"
    return None


def _allowed_segments(entry: str) -> list[str]:
    """An allowed-registry entry as path segments: normalised host first, then repository parts."""
    problem = allowed_registry_problem(entry)
    if problem is not None:
        raise SecuremlError(
            f"allowed registry entry {problem}",
            why="entries are registry prefixes such as 'ghcr.io/acme/'; without a valid host the "
            "meaning is ambiguous (Docker Hub user or official image?)",
            fix="correct the entry in the profile",
            where="spec.images.allowedRegistries",
        )
    segments = entry.strip().rstrip("/").split("/")
    return [_normalise_registry(segments[0]), *segments[1:]]


def registry_allowed(ref: ImageRef, allowed: list[str]) -> bool:
    """True when `ref` lies under one of the `allowed` prefixes, compared by whole path segments.

    `ghcr.io/acme` and `ghcr.io/acme/` mean the same; neither admits `ghcr.io/acmecorp/x`. Hosts
    compare case-insensitively and Docker Hub's aliases are one registry. An entry without a
    registry host raises `SecuremlError` (fail closed rather than guess).
    """
    ref_segments = [ref.registry, *ref.repository.split("/")]
    for entry in allowed:
        segments = _allowed_segments(entry)
        if ref_segments[: len(segments)] == segments:
            return True
    return False
