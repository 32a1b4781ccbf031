"""A pipeline file's `@dsl.pipeline` objects, built by kfp only when something reads them.

kfp's `@dsl.pipeline` traces the function and builds the whole pipeline spec when the file is
imported. `secureml compile` never reads that spec: it traces the function again with the
controls written in (`secureml.compile.compiler`) and writes the YAML of that second build alone. So the
first build was pure cost, at 500 steps about a fifth of the command's CPU time and memory.

Within `deferred_builds()`, `@dsl.pipeline` returns a `DeferredGraph`: a `GraphComponent` whose
kfp constructor runs, unchanged, at the first read of its `component_spec` (which `pipeline_spec`,
`platform_spec`, calling it inside another pipeline and `kfp.compiler` all go through). Until
then it holds what kfp's constructor is given, and the attributes that constructor sets before it
traces (`name`, `description`, `pipeline_func`, `pipeline_config`). The compiler reads only
those and the component's interface (`spec_of`, `display_name_of`), which the build does not
change (it adds the built graph and platform spec to the interface, nothing else), so the YAML it
writes is the one it wrote after a build. What changes is when the function is traced: an error
it raises comes from the compiler's own trace instead of the import, where the caller turns it
into the import's message by running the deferred build (`secureml.compile.pipeline_loader.build_now`).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kfp.dsl.base_component import BaseComponent
from kfp.dsl.graph_component import GraphComponent

if TYPE_CHECKING:
    from kfp.dsl import structures


class DeferredGraph(GraphComponent):  # type: ignore[misc]  # kfp has no type hints
    """A `GraphComponent` whose kfp build runs when its `component_spec` is first read."""

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
        """kfp's own constructor, now, once; where it raises, the next read tries again.

        kfp built it where the pipeline was defined, outside any pipeline; a deferred graph is
        first read inside the trace of the pipeline that calls it (a nested pipeline), where
        kfp refuses to trace another (`Nested pipelines are not allowed`). So the pipeline being
        traced is set aside for the build and put back after, as kfp's own `Pipeline.__exit__`
        puts back the task handler it replaced.
        """
        from kfp.dsl import pipeline_context

        pending = self.__dict__.pop("_pending", None)
        if pending is None:
            return
        tracing = pipeline_context.Pipeline._default_pipeline
        pipeline_context.Pipeline._default_pipeline = None
        try:
            GraphComponent.__init__(self, *pending)
        except BaseException:
            self.__dict__["_pending"] = pending
            raise
        finally:
            pipeline_context.Pipeline._default_pipeline = tracing


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


@contextlib.contextmanager
def deferred_builds() -> Iterator[None]:
    """Within the block, `@dsl.pipeline` makes `DeferredGraph`s; kfp's function is put back after."""
    from kfp.dsl import component_factory

    original = component_factory.create_graph_component_from_func

    def deferred(
        func: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        display_name: str | None = None,
        pipeline_config: Any = None,
    ) -> GraphComponent:
        # what kfp's create_graph_component_from_func does, its GraphComponent deferred
        spec = component_factory.extract_component_interface(
            func, description=description, name=name
        )
        return DeferredGraph(spec, func, display_name, pipeline_config)

    component_factory.create_graph_component_from_func = deferred
    try:
        yield
    finally:
        component_factory.create_graph_component_from_func = original
