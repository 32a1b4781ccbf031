"""The build context the images of `images/` are built from (docs/images.md)."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

from secureml.core.errors import InputError

# What the launcher imports beyond the standard library (NVML; the identity stage's SPIFFE client,
# which brings grpcio, protobuf and cryptography; the verify-inputs stage's sigstore and
# model-signing, which imports pyOpenSSL undeclared), and kfp's executor for the step base images.
RUNTIME_REQUIREMENTS = ("nvidia-ml-py", "spiffe", "sigstore", "model-signing", "pyopenssl")
EXECUTOR_REQUIREMENTS = ("kfp",)
CUDA_REQUIREMENTS = ("nvidia-cuda-runtime-cu12",)
# The runtime is `enforcement/` (whole, without builds and fuzzers) plus the modules of the
# package it imports, found by reading the imports (`runtime_modules`), and the lazy root package.
ROOT_FILES = ("__init__.py", "py.typed")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "fuzz", "*.o")

PACKAGE_DIR = Path(__file__).resolve().parent.parent
# The installed secureml's version (pyproject.toml takes it from `SECUREML_VERSION`).
SECUREML_VERSION = importlib.metadata.version("secureml")
_SPEC = find_spec("secureml.enforcement")
ENFORCEMENT_DIR = Path(_SPEC.origin if _SPEC and _SPEC.origin else "").parent
IMAGES_DIR = PACKAGE_DIR.parent / "images"


def cache_dir() -> Path:
    """~/.cache/secureml/images (or $XDG_CACHE_HOME/secureml/images)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "secureml" / "images"


def images_dir() -> Path:
    """The `images/` folder of this checkout (the Containerfiles ship with the source tree)."""
    if not (IMAGES_DIR / "assemble.py").is_file():
        raise InputError(
            f"the image sources are not at {IMAGES_DIR}",
            why="the Containerfiles and their build scripts ship in secureml's source tree, not in "
            "the installed package",
            fix="run this from a checkout of secureml (pip install -e .)",
        )
    return IMAGES_DIR


def pinned(names: Sequence[str]) -> list[str]:
    """`name==version` for each requirement, at the version installed here; refused when absent."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise InputError(
                f"{name} is not installed beside secureml",
                why="the images carry the versions secureml is tested with, read from this "
                "environment",
                fix=f"pip install {name} (for the CUDA image: pip install 'secureml[test]')",
            ) from None
    return pins


def _constraints() -> list[str]:
    """Every distribution of this environment at its version: pins the requirements' closure."""
    seen: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name != "secureml":
            seen.setdefault(name, dist.version)
    return sorted(f"{name}=={version}" for name, version in seen.items())


def wheelhouse(requirements: Sequence[str]) -> Path:
    """The requirements and their dependencies as wheels (cached; `pip wheel` on a miss)."""
    constraints = _constraints()
    key = hashlib.sha256("\n".join([*requirements, "--", *constraints]).encode()).hexdigest()[:16]
    target = cache_dir() / "wheels" / key
    if (target / ".complete").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    (target / "constraints.txt").write_text("\n".join(constraints) + "\n")
    command = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(target)]
    command += ["-c", str(target / "constraints.txt"), *requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise InputError(
            "the image's Python wheels could not be fetched",
            why=result.stderr.strip()[-2000:] or "pip wheel failed",
            fix="check that pip reaches its index (pip config list), then run the build again",
        )
    (target / ".complete").write_text("\n".join(requirements) + "\n")
    return target


def _imported_modules(source: Path) -> set[str]:
    """The `secureml.X` modules a file imports at run time (at any depth; `if TYPE_CHECKING:`
    blocks left out)."""
    tree = ast.parse(source.read_text(), str(source))
    for block in ast.walk(tree):
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
            block.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "secureml":
                found.update(f"secureml.{alias.name}" for alias in node.names)
            elif node.module.startswith("secureml."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("secureml."))
    return found


def runtime_modules() -> list[Path]:
    """The files of `secureml` (outside `enforcement/`) that the launcher's code imports,
    transitively: top-level modules, and single modules of a subpackage (with its `__init__.py`),
    e.g. `supplychain/models.py` for the verify-inputs stage."""
    pending = [p for p in ENFORCEMENT_DIR.rglob("*.py") if "fuzz" not in p.parts]
    seen: set[Path] = set()
    while pending:
        for name in _imported_modules(pending.pop()):
            parts = name.split(".")[1:]
            if parts[0] in ("enforcement", "components"):
                continue
            files = []
            for depth in range(1, len(parts) + 1):
                found = _module_file(parts[:depth])
                if found is None:  # `from secureml.pkg.module import name`: a name, no module
                    break
                files.append(found)
            if not files:
                raise InputError(
                    f"the launcher imports {name}, which is not a module file of secureml",
                    why="the runtime carries the package's module files the launcher imports",
                    fix="import secureml's modules by their full name",
                )
            for candidate in files:
                if candidate not in seen:
                    seen.add(candidate)
                    pending.append(candidate)
    return sorted(seen)


def _module_file(parts: Sequence[str]) -> Path | None:
    """`secureml/<a>/<b>.py` or `secureml/<a>/<b>/__init__.py` for ["a", "b"], if it exists."""
    base = PACKAGE_DIR.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def stage(dest: Path, requirements: Sequence[str]) -> Path:
    """Fill `dest` (empty or absent) with the build context for `requirements`."""
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "src" / "secureml"
    src.mkdir(parents=True)
    for name in ROOT_FILES:
        if (PACKAGE_DIR / name).is_file():
            shutil.copy2(PACKAGE_DIR / name, src / name)
    for module in runtime_modules():
        target = src / module.relative_to(PACKAGE_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, target)
    shutil.copytree(ENFORCEMENT_DIR, src / "enforcement", ignore=_SKIP)
    shutil.copytree(images_dir(), dest / "images", ignore=_SKIP)
    wheels = dest / "wheels"
    wheels.mkdir()
    for wheel in wheelhouse(requirements).glob("*.whl"):
        os.link(wheel, wheels / wheel.name) if _same_device(wheel, wheels) else shutil.copy2(
            wheel, wheels / wheel.name
        )
    (dest / "requirements.txt").write_text("\n".join(requirements) + "\n")
    (dest / "VERSION").write_text(SECUREML_VERSION + "\n")
    return dest


def _same_device(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev
