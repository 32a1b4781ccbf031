"""Tables for people (the compile report, check-pod's verdicts, the run summary), as text."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence

_PRINTABLE = re.compile(r"[\x20-\x7e]*\Z")


def render_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    width: int | None = None,
) -> str:
    cells = [list(row) for row in rows]
    if width is None:
        plain = _plain_table(headers, cells, title)
        if plain is not None:
            return plain
    return _rich_table(headers, cells, title, width)


def _plain_table(headers: Sequence[str], rows: list[list[str]], title: str | None) -> str | None:
    """The natural-width table as rich draws it, or None where the cells need rich (non-ASCII or
    control characters, line breaks, markup or an emoji code in a header, a ragged row, a column with no text, a title wider than the table)."""
    cells = [list(headers), *rows]
    if any(len(row) != len(headers) for row in rows) or not headers:
        return None
    if any("[" in header or ":" in header for header in headers):  # rich: markup and :emoji:
        return None
    if not all(_PRINTABLE.match(cell) for row in cells for cell in row):
        return None
    if title is not None and not _PRINTABLE.match(title):
        return None
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    total = sum(widths) + 2 * (len(widths) - 1)
    if min(widths) == 0 or (title and len(title) > total):
        return None

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.ljust(size) for cell, size in zip(row, widths, strict=True)).rstrip()

    lines = [title.rstrip()] if title else []
    lines += [line(headers), "─" * total, *(line(row) for row in rows)]
    return "\n".join(lines)


def _rich_table(
    headers: Sequence[str], rows: list[list[str]], title: str | None, width: int | None
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
