"""Tables for people, laid out by rich: the compile report, check-pod's verdicts, the run summary.

`render_table` returns text, so library reports and the CLI print the same thing. With no `width`
the table takes its natural width (nothing wrapped or cut: what a pipe, a log or a test reads);
given a terminal's width it wraps long cells inside their column, never cutting a name or a path.
rich is imported here only, on first use, so `secureml --help` does not load it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence


def render_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    width: int | None = None,
) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=box.SIMPLE_HEAD,
        title=Text(title) if title else None,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),  # with the box's blank divider: two spaces between columns
    )
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: a "[rule]" cell is not rich markup
    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 10_000, color_system=None, highlight=False)
    if width is None:
        console.width = max(console.measure(table).maximum, len(title or ""))
    console.print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
