"""No import cycle among secureml's modules, neither at module level nor through lazy imports.

A module-level cycle makes the import order matter (a half-initialised module answers
AttributeError); a cycle closed by an import inside a function is the same knot, deferred, and ties
modules that should stand alone (the launcher must import without kfp or pydantic). Imports under
`if TYPE_CHECKING:` are left out: they never run.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _layout():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "package_layout", ROOT / "scripts/package_layout.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("package_layout", module)
    spec.loader.exec_module(module)
    return module


MODULES: dict[str, Path] = _layout().package_modules()


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, *, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under `node` that can run: at module level (also inside if/try/with),
    and with `lazy` also those in function and class bodies; never under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        elif _is_type_checking(child):
            assert isinstance(child, ast.If)
            for other in child.orelse:
                found += _imports(ast.Module(body=[other], type_ignores=[]), lazy=lazy)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            if lazy:
                found += _imports(child, lazy=lazy)
        elif isinstance(child, ast.stmt | ast.excepthandler):
            found += _imports(child, lazy=lazy)
    return found


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules one import statement loads (`from pkg import mod` names the module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in MODULES}
    is_package = MODULES[module].name == "__init__.py"
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    source = ".".join(p for p in (base if node.level else "", node.module or "") if p)
    targets = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
    return targets or ({source} & MODULES.keys())


def import_graph(*, lazy: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _imports(tree, lazy=lazy):
            edges |= _imported(module, node)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_walk_sees_the_mapped_subpackages_and_their_imports() -> None:
    graph = import_graph()
    assert {"secureml.enforcement.launch", "secureml.components.steps", "secureml.cli"} <= set(
        graph
    )
    assert "secureml.contract" in graph["secureml.enforcement.launch"]
    # secureml.gpu names TenantProfile for annotations only (TYPE_CHECKING): no edge
    assert "secureml.profile" not in import_graph(lazy=True)["secureml.gpu"]
    # a function's own import counts once lazy imports are followed
    assert "secureml.preview" in import_graph(lazy=True)["secureml.compiler"]


# Cycles that exist today and are being removed: the CLI's package registers its command modules
# by importing them at the bottom of secureml/cli/__init__.py, and they import `app` from it
# (issue 11, item 4: the app in one module, no import-order side effects).
def _known(component: list[str]) -> bool:
    return all(m == "secureml.cli" or m.startswith("secureml.cli.") for m in component)


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-lazy-imports"])
def test_imports_have_no_cycle(lazy: bool) -> None:
    found = [c for c in cycles(import_graph(lazy=lazy)) if not _known(c)]
    assert not found, "import cycles (break them with a module both sides import): " + "; ".join(
        " <-> ".join(component) for component in found
    )


def test_a_cycle_is_detected() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
