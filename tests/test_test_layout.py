"""The tests' own layout: every test folder is a package, and what folders share lives in tests/support/.

A test module imports its own folder, `tests.support` (helpers used by more than one folder) and
`tests.harness` (the Go-built cluster), by their package names. It never imports another folder's
conftest.py or test modules, nor a helper by a bare name that only works while some folder is on
sys.path. tests/support/ imports nothing of the test folders. A deliberately bad tree shows each
check fails.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import REPO

TESTS = REPO / "tests"
SHARED = ("support", "harness")  # the packages every folder may import


def _package(path: Path, root: Path) -> tuple[str, ...]:
    return path.relative_to(root.parent).with_suffix("").parts[:-1]


def _imported(node: ast.Import | ast.ImportFrom, package: tuple[str, ...]) -> Iterator[str]:
    """The absolute module names one import statement names (a `from` import's names too, since
    `from pkg import mod` imports the module)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = list(package[: len(package) - node.level + 1]) if node.level else []
    module = ".".join([*base, *([node.module] if node.module else [])])
    yield module
    yield from (f"{module}.{alias.name}" for alias in node.names)


def _is_file(module: str, root: Path) -> Path | None:
    """The file of `module` (dotted, from the folder above `root`) when it is a test module file."""
    path = root.parent.joinpath(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _bare_names(root: Path) -> set[str]:
    """Top-level names that would resolve to a file or folder inside the tests tree only."""
    names = {path.stem for path in root.rglob("*.py")} | {
        path.name for path in root.rglob("*") if path.is_dir()
    }
    return {
        name
        for name in names
        if name.isidentifier() and name != "__init__" and importlib.util.find_spec(name) is None
    }


def problems(root: Path) -> list[str]:
    """Every import in the tests tree at `root` that breaks the layout."""
    found: list[str] = []
    bare = _bare_names(root)
    folders = {path.parent for path in root.rglob("*.py")} | {root}
    found += [
        f"{folder.relative_to(root.parent)}: no __init__.py"
        for folder in sorted(folders)
        if not (folder / "__init__.py").is_file()
    ]
    for path in sorted(root.rglob("*.py")):
        package = _package(path, root)
        folder = package[1] if len(package) > 1 else ""
        where = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            before = len(found)
            for module in _imported(node, package):
                if len(found) > before:
                    break  # one problem per statement
                parts = module.split(".")
                if parts[0] != root.name:
                    if parts[0] in bare and not (isinstance(node, ast.ImportFrom) and node.level):
                        found.append(f"{where}:{node.lineno}: bare-name import of {module}")
                    continue
                if len(parts) < 2 or parts[1] in SHARED:
                    continue
                file = _is_file(module, root)
                other = parts[1] != folder and (file is None or file.parent != root)
                if folder == "support" and parts[1] != "support":
                    found.append(
                        f"{where}:{node.lineno}: tests/support imports a test folder: {module}"
                    )
                elif other and file is not None:
                    kind = "conftest" if file.name == "conftest.py" else "test module"
                    if file.name.startswith("test_") or kind == "conftest":
                        found.append(
                            f"{where}:{node.lineno}: imports another folder's {kind} {module}"
                        )
                    else:
                        found.append(
                            f"{where}:{node.lineno}: imports another folder's helper {module} "
                            "(a helper two folders use belongs in tests/support/)"
                        )
                elif file is not None and file.parent == root and file.name.startswith("test_"):
                    found.append(f"{where}:{node.lineno}: imports the test module {module}")
    return sorted(set(found))


def test_the_tests_follow_the_layout() -> None:
    assert problems(TESTS) == []


def test_a_bad_tree_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    files = {
        "__init__.py": "",
        "fakehelper.py": "",
        "test_top.py": "",
        "support/__init__.py": "",
        "support/good.py": "from tests.support import good\n",
        "support/upward.py": "from tests.alpha.helper import x\n",
        "alpha/__init__.py": "",
        "alpha/conftest.py": "X = 1\n",
        "alpha/helper.py": "x = 1\n",
        "alpha/test_a.py": "from .conftest import X\nfrom tests.alpha.helper import x\n",
        "beta/__init__.py": "",
        "beta/test_b.py": (
            "from tests.alpha.conftest import X\n"
            "from tests.alpha import test_a\n"
            "from tests.alpha.helper import x\n"
            "from fakehelper import y\n"
            "from tests.test_top import z\n"
            "from tests.support.good import w\n"
        ),
        "gamma/test_c.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert problems(root) == [
        "tests/beta/test_b.py:1: imports another folder's conftest tests.alpha.conftest",
        "tests/beta/test_b.py:2: imports another folder's test module tests.alpha.test_a",
        "tests/beta/test_b.py:3: imports another folder's helper tests.alpha.helper "
        "(a helper two folders use belongs in tests/support/)",
        "tests/beta/test_b.py:4: bare-name import of fakehelper",
        "tests/beta/test_b.py:5: imports the test module tests.test_top",
        "tests/gamma: no __init__.py",
        "tests/support/upward.py:1: tests/support imports a test folder: tests.alpha.helper",
    ]
