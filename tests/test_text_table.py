"""secureml.core.text_table: the plain layout is exactly rich's, on generated tables, and rich still
draws what the plain layout does not take (wide characters, line breaks, a given width)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from secureml.core.text_table import _plain_table, _rich_table, render_table

ascii_cells = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]], str | None]:
    columns = draw(st.integers(min_value=1, max_value=5))
    headers = draw(st.lists(ascii_cells, min_size=columns, max_size=columns))
    rows = draw(st.lists(st.lists(ascii_cells, min_size=columns, max_size=columns), max_size=6))
    return headers, rows, draw(st.none() | ascii_cells)


@settings(max_examples=250, deadline=None)
@given(tables())
def test_the_plain_layout_is_richs(table: tuple[list[str], list[list[str]], str | None]) -> None:
    headers, rows, title = table
    plain = _plain_table(headers, rows, title)
    if plain is not None:
        assert plain == _rich_table(headers, rows, title, None)


def test_the_compile_report_table_takes_the_plain_layout() -> None:
    headers = ["TASK", "KIND", "CONTROLS"]
    rows = [["prepare", "secure", "launcher, uid 1000"], ["train-2", "secure", "-"]]
    assert _plain_table(headers, rows, None) is not None
    assert render_table(headers, rows) == _rich_table(headers, rows, None, None)


def test_rich_draws_the_rest() -> None:
    for headers in (["[b]TASK[/b]", "NOTE"], [":smile:", "NOTE"]):  # rich's markup and emoji
        assert _plain_table(headers, [["a", "b"]], None) is None
        assert render_table(headers, [["a", "b"]]) == _rich_table(headers, [["a", "b"]], None, None)
    headers = ["TASK", "NOTE"]
    for rows in ([["é", "x"]], [["a", "two\nlines"]], [["日本", "x"]]):
        assert _plain_table(headers, rows, None) is None
        assert render_table(headers, rows) == _rich_table(headers, rows, None, None)
    assert render_table(headers, [["a", "b " * 30]], width=20) == _rich_table(
        headers, [["a", "b " * 30]], None, 20
    )
