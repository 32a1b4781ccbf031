"""The package's source folders and module names, as setup.py installs them.

setup.py maps `components/` and `enforcement/` into the package as `secureml.components` and
`secureml.enforcement` (its `SUBTREES`). Tools that walk the source (scripts/typecheck.py, the
import-graph test) read the mapping here instead of repeating it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_folders() -> dict[str, Path]:
    """The import name of each source folder: `secureml` plus setup.py's `SUBTREES`."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "SUBTREES" for target in node.targets
        ):
            subtrees: dict[str, str] = ast.literal_eval(node.value)
            return {"secureml": ROOT / "secureml"} | {
                name: ROOT / folder for name, folder in subtrees.items()
            }
    raise SystemExit("setup.py has no SUBTREES mapping: update scripts/package_layout.py")


def package_modules() -> dict[str, Path]:
    """Every Python file of the package by the module name it is imported as."""
    found: dict[str, Path] = {}
    for package, folder in package_folders().items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found
