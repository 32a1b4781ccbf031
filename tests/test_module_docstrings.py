"""Every module under secureml/ says what it is for in one to three docstring lines.

Why a module is built as it is goes to docs/ (architecture.md's design notes, the topical pages)
or beside the code it explains; measurements go to docs/performance.md with their date.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 3


def docstring_problem(source: str) -> str | None:
    """Why a module's source fails the rule, or None."""
    docstring = ast.get_docstring(ast.parse(source), clean=True)
    if docstring is None or not docstring.strip():
        return "has no module docstring"
    lines = len(docstring.strip().splitlines())
    if lines > MAX_LINES:
        return f"has a {lines}-line module docstring (at most {MAX_LINES})"
    return None


def test_every_module_docstring_is_one_to_three_lines() -> None:
    modules = sorted((ROOT / "secureml").rglob("*.py"))
    assert len(modules) > 100  # the walk found the package
    problems = []
    for module in modules:
        problem = docstring_problem(module.read_text(encoding="utf-8"))
        if problem is not None:
            problems.append(f"{module.relative_to(ROOT)} {problem}")
    assert not problems, (
        "module docstrings say what the module is for in 1-3 lines; move the why to docs/ "
        "(architecture.md's design notes or the topical page) or beside the code:\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""One line."""\n', None),
        ('"""One line.\n\nA third line.\n"""\n', None),
        ("x = 1\n", "has no module docstring"),
        ('""" """\n', "has no module docstring"),
        ('"""1\n2\n3\n4\n"""\n', "has a 4-line module docstring (at most 3)"),
    ],
)
def test_the_rule_itself(source: str, expected: str | None) -> None:
    assert docstring_problem(source) == expected
