"""A pipeline file's `@dsl.pipeline` objects, built by kfp only when something reads them.

`secureml compile` builds the pipeline itself with the controls; kfp's build at import is skipped.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import functools
import traceback
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kfp.dsl import pipeline_context
from kfp.dsl.base_component import BaseComponent
from kfp.dsl.graph_component import GraphComponent
from kfp.pipeline_spec import pipeline_spec_pb2

if TYPE_CHECKING:
    from kfp.dsl import structures
    from kfp.dsl.pipeline_task import PipelineTask

# The name under which the rewritten file finds `deferring`, in its own module namespace.
HOOK = "__secureml_deferring__"
_RETRACING: contextvars.ContextVar[bool] = contextvars.ContextVar("retracing", default=False)


@contextlib.contextmanager
def retracing() -> Iterator[None]:
    """The compiler's trace: a deferred pipeline called inside it is not built (see `__call__`)."""
    token = _RETRACING.set(True)
    try:
        yield
    finally:
        _RETRACING.reset(token)


class DeferredGraph(GraphComponent):  # type: ignore[misc]  # kfp has no type hints
    """A `GraphComponent` whose kfp build runs when its `component_spec` is first read.

    Until then it holds what kfp's constructor is given and sets before it traces (`name`,
    `description`, `pipeline_func`, `pipeline_config`); its interface is the one the build keeps.
    """

    def __init__(
        self,
        component_spec: structures.ComponentSpec,
        pipeline_func: Callable[..., Any],
        display_name: str | None = None,
        pipeline_config: Any = None,
    ) -> None:
        BaseComponent.__init__(self, component_spec)  # name, description, inputs: no trace
        self.pipeline_func = pipeline_func
        self.pipeline_config = pipeline_config
        self.__dict__["_display_name"] = display_name
        created = traceback.StackSummary.extract(traceback.walk_stack(None), lookup_lines=False)
        created.reverse()  # outermost first, as a traceback lists them
        self.__dict__["_created_at"] = created
        self.__dict__["_pending"] = (component_spec, pipeline_func, display_name, pipeline_config)

    @property
    def component_spec(self) -> structures.ComponentSpec:
        if not self.__dict__.get("_interface_only"):
            self.build()
        spec: structures.ComponentSpec = self.__dict__["_spec"]
        return spec

    @component_spec.setter
    def component_spec(self, value: structures.ComponentSpec) -> None:
        self.__dict__["_spec"] = value

    @property
    def built(self) -> bool:
        return "_pending" not in self.__dict__

    @property
    def created_at(self) -> traceback.StackSummary:
        """Where `@dsl.pipeline` made it: the frames a build error at import would have shown."""
        created: traceback.StackSummary = self.__dict__["_created_at"]
        return created

    def build(self) -> None:
        """kfp's own constructor, now, once; where it raises, the next read tries again. The
        deferred pipelines it calls by name are built first: kfp traces one pipeline at a time."""
        pending = self.__dict__.pop("_pending", None)
        if pending is None:
            return
        try:
            for inner in referenced_graphs(self.pipeline_func):
                if isinstance(inner, DeferredGraph) and inner is not self:
                    inner.build()
            GraphComponent.__init__(self, *pending)
        except BaseException:
            self.__dict__["_pending"] = pending
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> PipelineTask:
        """A task of this pipeline; in the compiler's trace (`retracing`), made from the interface
        alone: the compiler gives the task its own secured build of this pipeline."""
        if self.built or not _RETRACING.get():
            return super().__call__(*args, **kwargs)
        self.__dict__["_interface_only"] = True
        try:
            task: PipelineTask = super().__call__(*args, **kwargs)
        finally:
            del self.__dict__["_interface_only"]
        task.pipeline_spec = pipeline_spec_pb2.PipelineSpec()  # a nested pipeline's, unbuilt
        return task


def referenced_graphs(func: Callable[..., Any]) -> list[GraphComponent]:
    """GraphComponents a pipeline function can reach by name: its globals, closure, and attributes
    of modules it names (`other_module.inner_pipeline`). These are the nested pipelines it may call."""
    code = getattr(func, "__code__", None)
    if code is None:
        return []
    names: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    found: dict[int, GraphComponent] = {}
    scope = getattr(func, "__globals__", {})
    values = [scope[name] for name in sorted(names) if name in scope]
    values += [cell.cell_contents for cell in (func.__closure__ or ()) if _cell_filled(cell)]
    for value in list(values):
        if isinstance(value, types.ModuleType):
            values.extend(getattr(value, name) for name in sorted(names) if hasattr(value, name))
    for value in values:
        if isinstance(value, GraphComponent):
            found.setdefault(id(spec_of(value)), value)
    return list(found.values())


def _cell_filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def spec_of(graph: GraphComponent) -> structures.ComponentSpec:
    """`graph.component_spec`, without building a deferred graph."""
    if isinstance(graph, DeferredGraph):
        spec: structures.ComponentSpec = graph.__dict__["_spec"]
        return spec
    return graph.component_spec


def display_name_of(graph: GraphComponent) -> str | None:
    """The pipeline's display name as kfp's build records it (`pipeline_info.display_name`, which
    only the `display_name=` of `@dsl.pipeline` sets), without building a deferred graph."""
    if isinstance(graph, DeferredGraph):
        name: str | None = graph.__dict__["_display_name"]
        return name or None
    return graph.pipeline_spec.pipeline_info.display_name or None


def deferring(decorator: Any) -> Any:
    """`decorator`, or where it is kfp's `dsl.pipeline`, the same decorator making deferred graphs."""
    return deferred_pipeline if decorator is pipeline_context.pipeline else decorator


def deferred_pipeline(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    pipeline_root: str | None = None,
    display_name: str | None = None,
    pipeline_config: Any = None,
) -> Any:
    """`kfp.dsl.pipeline` (kfp 2.17's `pipeline` and `create_graph_component_from_func`), its
    `GraphComponent` deferred."""
    from kfp.dsl import component_factory

    if func is None:
        return functools.partial(
            deferred_pipeline,
            name=name,
            description=description,
            pipeline_root=pipeline_root,
            display_name=display_name,
            pipeline_config=pipeline_config,
        )
    if pipeline_root:
        func.pipeline_root = pipeline_root  # type: ignore[attr-defined]  # as kfp's decorator
    spec = component_factory.extract_component_interface(func, description=description, name=name)
    return DeferredGraph(spec, func, display_name, pipeline_config)


class _Deferring(ast.NodeTransformer):
    """Every `<x>.pipeline` and name imported as kfp.dsl's `pipeline`, read through `deferring`."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        self.generic_visit(node)
        return self._wrapped(node) if node.attr == "pipeline" else node

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self._wrapped(node) if node.id in self.names else node

    @staticmethod
    def _wrapped(node: ast.Attribute | ast.Name) -> ast.expr:
        if not isinstance(node.ctx, ast.Load):
            return node
        hook = ast.Name(id=HOOK, ctx=ast.Load())
        return ast.copy_location(ast.Call(func=hook, args=[node], keywords=[]), node)


def deferred_code(source: str | bytes, filename: str) -> types.CodeType:
    """The code of a pipeline file whose `dsl.pipeline` makes `DeferredGraph`s; it runs in a
    namespace where `HOOK` is `deferring` (everything else, and every line number, as written)."""
    tree = ast.parse(source, filename)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kfp.dsl")
        for alias in node.names
        if alias.name == "pipeline"
    }
    tree = ast.fix_missing_locations(_Deferring(names).visit(tree))
    code: types.CodeType = compile(tree, filename, "exec", dont_inherit=True)
    return code
