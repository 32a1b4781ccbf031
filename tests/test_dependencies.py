"""Every third-party package secureml's code imports is declared in pyproject.toml's dependencies.

A package that arrives only through another's requirements (`kubernetes` through kfp, `rich`
through typer) disappears or changes range when that other package changes; the import finds it
until then, so nothing else would notice.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

from tests.support.package_modules import MODULES

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (PEP 503)."""
    bare = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", bare).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_name(requirement) for requirement in project["dependencies"]}


@cache
def _owners() -> dict[Path, str]:
    """Installed file -> the distribution that installed it."""
    owners: dict[Path, str] = {}
    for distribution in importlib.metadata.distributions():
        for file in distribution.files or ():
            owners[Path(distribution.locate_file(file)).resolve()] = _name(
                distribution.metadata["Name"]
            )
    return owners


def distribution_of(module: str) -> str | None:
    """The distribution that installed `module`: its top-level package's, where one distribution
    installs it; else (`google`, `kfp`: several share the name) that of the first file found at
    the first two levels (`google.protobuf` is protobuf's, `kfp.kubernetes` kfp-kubernetes')."""
    parts = module.split(".")
    owners = importlib.metadata.packages_distributions().get(parts[0], [])
    if len(set(owners)) == 1:
        return _name(owners[0])
    for depth in range(min(len(parts), 2), 0, -1):
        spec = importlib.util.find_spec(".".join(parts[:depth]))
        if spec is not None and spec.origin not in (None, "namespace"):
            return _owners().get(Path(spec.origin).resolve())
    return None


def third_party_imports() -> dict[str, set[str]]:
    """Imported module -> the secureml modules that import it (every import statement counted)."""
    found: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "secureml" and top not in sys.stdlib_module_names:
                    found.setdefault(name, set()).add(module)
    return found


def test_every_imported_package_is_declared() -> None:
    dependencies = declared()
    undeclared = {}
    for name, importers in sorted(third_party_imports().items()):
        distribution = distribution_of(name)
        assert distribution is not None, (
            f"{name} (imported by {sorted(importers)}) is not installed"
        )
        if distribution not in dependencies:
            undeclared[name] = (distribution, sorted(importers)[:3])
    assert not undeclared, (
        "imported but not in pyproject.toml's [project] dependencies (add each with the range "
        f"tested): {undeclared}"
    )


def test_a_namespace_package_is_traced_to_its_distribution() -> None:
    assert distribution_of("google.protobuf.json_format") == "protobuf"
    assert distribution_of("kubernetes.client") == "kubernetes"
    assert distribution_of("kfp.kubernetes") == "kfp-kubernetes"
