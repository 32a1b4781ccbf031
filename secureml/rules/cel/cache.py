"""Compiled programs of the fast CEL engine kept on disk between processes, in a private folder."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# What a cached program may refer to beyond CEL's standard library, for each of the engine's
# environments (`cel_cpp._env`): bump it whenever that environment or the way programs are made
# from a text changes (v2: planned from the parsed tree, `cel_cpp._planned`), so that no program
# made another way is read back.
ENVIRONMENTS = {
    "base": "object,oldObject:dyn; secureml_matches(string,string)bool; v2",
    "strings": "object,oldObject:dyn; ext_strings; secureml_matches(string,string)bool; v2",
}


def folder() -> Path | None:
    """The cache folder for compiled programs, or None when caching is off."""
    chosen = os.environ.get("SECUREML_CACHE_DIR")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen) / "cel"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "secureml" / "cel"


def load(
    expression: str,
    compile_program: Callable[[str], Any],
    deserialize: Callable[[bytes], Any],
    environment: str = "base",
) -> Any:
    """The program for `expression` in one of `ENVIRONMENTS`: read back from the cache, else
    compiled (and then kept). Raises whatever `compile_program` raises for a text the engine
    refuses."""
    where = _private_folder()
    if where is None:
        return compile_program(expression)
    path = where / f"{_key(ENVIRONMENTS[environment] + chr(0) + expression)}.bin"
    cached = _read(path)
    if cached is not None:
        try:
            return deserialize(cached)
        except Exception:  # noqa: BLE001 - bytes the engine refuses: compile and replace them
            pass
    program = compile_program(expression)
    _write(where, path, program.serialize())
    return program


def load_json(kind: str, text: str, compute: Callable[[], Any]) -> Any:
    """`compute()`, a JSON value derived from `text` alone, kept beside the programs under the
    SHA-256 of `kind` and `text` as well (`kind` must name everything else the value depends on,
    such as the version of the code that computes it: `verdict_memo` uses its analysis' source)."""
    found = read_json(kind, text, _NOT_KEPT)
    if found is _NOT_KEPT:
        found = compute()
        write_json(kind, text, found)
    return found


_NOT_KEPT = object()


def read_json(kind: str, text: str, default: Any = None) -> Any:
    """The JSON value kept under `kind` and `text` (`write_json`), or `default`: none kept,
    caching off, a file cut short."""
    where = _private_folder()
    cached = None if where is None else _read(_json_path(where, kind, text))
    if cached is None:
        return default
    try:
        return json.loads(cached)
    except ValueError:
        return default


def write_json(kind: str, text: str, value: Any) -> None:
    """Keep `value` under `kind` and `text` (replacing what was kept), where caching is on."""
    where = _private_folder()
    if where is not None:
        _write(where, _json_path(where, kind, text), json.dumps(value).encode())


def _json_path(where: Path, kind: str, text: str) -> Path:
    return where / f"{_key(kind + chr(0) + text)}.json"


def source_version(*modules: ModuleType) -> str:
    """The SHA-256 of these modules' source files: a `load_json` kind for values they compute,
    so that a changed module never reads what an older one kept."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def _key(text: str) -> str:
    return hashlib.sha256(f"{_engine()}\0{text}".encode()).hexdigest()


@functools.cache
def _engine() -> str:
    """The engine's build: the names of its installed distributions' metadata folders (its version)
    and the path, size and modification time of each compiled module the environment loads, as
    Python checks a source against its `__pycache__` (an upgrade or a reinstall changes them).
    Looked up once, without `importlib.metadata`: importing it and scanning every installed
    distribution was 20-30 ms of each `check-pod --level` start-up; and without importing the
    strings extension, which most processes never load (`cel_cpp`)."""
    from cel_expr_python import cel  # type: ignore[import-untyped]

    engine = Path(cel.__file__)
    parts = []
    for location in (engine, *sorted((engine.parent / "ext").glob("ext_strings*"))):
        status = location.stat()
        parts.append(f"{location}:{status.st_size}:{status.st_mtime_ns}")
    site = engine.parent.parent
    parts += sorted(path.name for path in site.glob("cel_expr_python-*.dist-info"))
    return "\0".join(parts)


def _private_folder() -> Path | None:
    """The cache folder, created 0700 if absent; None if it is not this user's alone."""
    where = folder()
    if where is None:
        return None
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        return where if _owned_and_private(where.stat()) else None
    except OSError:
        return None


def _owned_and_private(status: os.stat_result) -> bool:
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: Path) -> bytes | None:
    try:
        with path.open("rb") as handle:
            if not _owned_and_private(os.fstat(handle.fileno())):
                return None
            return handle.read()
    except OSError:
        return None


def _write(where: Path, path: Path, data: bytes) -> None:
    """Written whole or not at all (a temporary file renamed over the name)."""
    try:
        descriptor, temporary = tempfile.mkstemp(dir=where, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
