"""secureml's packages stand in layers: each imports only the packages below it, and no modules
import each other in a circle.

Every import counts, wherever it is written: at module level, inside a function (a lazy import is
the same dependency, deferred) and under `if TYPE_CHECKING:` (a type named in a signature is a
dependency of its reader). `LAYERS` is the written order; docs/architecture.md draws it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.package_modules import MODULES

# Bottom to top: a package may import itself and the packages listed before it, nothing after.
LAYERS: tuple[str, ...] = (
    "core",  # errors, violations, quantities, image references, the contract's names
    "nvidia",  # the GPU catalogue and Xid codes
    "_kfp",  # the only place that touches kfp's internals
    "profile",  # the TenantProfile
    "gpu",  # GPU requests and their placement on a tenant's cluster
    "supplychain",  # Sigstore verification, model signing
    "enforcement",  # the in-pod launcher (must import without kfp or pydantic)
    "images",  # step images: build, check, SBOM
    "pods",  # the pods a compiled pipeline becomes; the platform's mutation
    "rules",  # the admission rules and their CEL engines
    "trainer",  # TrainJobs
    "bundle",  # the tenant bundle's cluster objects
    "cluster",  # talking to a real API server
    "admission",  # verdicts on pods: check-pod
    "compile",  # the decorator, compile rules, the compiler
    "doctor",  # diagnoses, as data
    "components",  # the KFP component library
    "remoterun",  # secureml run --host, doctor pipeline: a run on a KFP server through kfp.Client
    "localrun",  # secureml run --local
    "cli",  # the command line
)
# The package's own `__init__` (the public API, loaded lazily) and `__main__` stand above all.
TOP = len(LAYERS)


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]


def _imported(
    module: str, node: ast.Import | ast.ImportFrom, modules: Mapping[str, Path]
) -> set[str]:
    """The package modules one import statement names (`from pkg import mod` names the module)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    is_package = modules[module].name == "__init__.py"
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    source = ".".join(p for p in (base if node.level else "", node.module or "") if p)
    targets = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()
    return targets or ({source} & modules.keys())


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules it imports, every import statement counted."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _imports(tree):
            edges |= _imported(module, node, modules)
        graph[module] = edges - {module}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One sorted list of modules per strongly connected component of more than one (Tarjan)."""
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


def layer(module: str, layers: tuple[str, ...] = LAYERS) -> int:
    """The layer of a module: that of its package (`secureml.<package>...`)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return TOP if layers is LAYERS else len(layers)
    if parts[1] not in layers:
        raise AssertionError(
            f"{module} is in no layer: add secureml.{parts[1]} to LAYERS "
            "(tests/test_import_graph.py) and to docs/architecture.md"
        )
    return layers.index(parts[1])


def upward_imports(graph: Mapping[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """`a -> b` for each import of a module from a higher layer."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target, layers) > layer(module, layers)
    )


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_imports_have_no_cycle() -> None:
    found = cycles(import_graph(MODULES))
    assert not found, "import cycles (break them with a module both sides import): " + "; ".join(
        " <-> ".join(component) for component in found
    )


def test_no_import_runs_up_the_layers() -> None:
    found = upward_imports(import_graph(MODULES))
    assert not found, "imports up the layers (LAYERS in this file):\n" + "\n".join(found)


def test_the_walk_sees_the_mapped_subpackages() -> None:
    graph = import_graph(MODULES)
    assert {"secureml.enforcement.launch", "secureml.components.steps", "secureml.cli"} <= set(
        graph
    )
    assert "secureml.core.contract" in graph["secureml.enforcement.launch"]


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for name, source in files.items():
        path = root / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        modules[name.removesuffix(".__init__")] = path
    return modules


def test_a_type_checking_circle_is_found(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "secureml.__init__": "",
            "secureml.low.__init__": "",
            "secureml.low.a": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from secureml.low.b import B\n",
            "secureml.low.b": "def f():\n    from secureml.low import a\n",
        },
    )
    assert cycles(import_graph(modules)) == [["secureml.low.a", "secureml.low.b"]]


def test_an_import_up_the_layers_is_found(tmp_path: Path) -> None:
    modules = _tree(
        tmp_path,
        {
            "secureml.__init__": "",
            "secureml.low.__init__": "",
            "secureml.low.a": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from secureml.high.b import B\n",
            "secureml.high.__init__": "",
            "secureml.high.b": "B = 1\n",
        },
    )
    graph = import_graph(modules)
    assert cycles(graph) == []
    assert upward_imports(graph, ("low", "high")) == ["secureml.low.a -> secureml.high.b"]


def test_a_module_outside_every_layer_is_refused() -> None:
    with pytest.raises(AssertionError, match="secureml.stray.x is in no layer"):
        layer("secureml.stray.x")
