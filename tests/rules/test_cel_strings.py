"""The fast engine's strings extension (`lowerAscii`, `split`, ...), loaded only where a rule
calls it: such a rule is judged on the fast path (the plain engine has no such functions) with
the verdicts CEL gives, beside rules that do not call it; and judging rules that never call it
leaves the extension's library unloaded."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from secureml.rules.cel import cpp as cel_cpp
from secureml.rules.engine import evaluate
from secureml.rules.model import Rule

STRINGS = (
    "object.metadata.name.lowerAscii() == object.metadata.name",
    "object.metadata.name.split('-').size() <= 3",
    "!object.metadata.name.upperAscii().contains('X')",
)
PLAIN = ("object.metadata.name.startsWith('a')", "size(object.metadata.name) < 12")
RULES = tuple(
    Rule(f"strings.{index}", f"rule {index}", text, "'no: ' + object.metadata.name", ("test",))
    for index, text in enumerate((*STRINGS, *PLAIN))
)


def _expected(name: str) -> list[str]:
    """The rules `name` breaks, by the functions' definitions."""
    broken = [name.lower() != name, len(name.split("-")) > 3, "X" in name.upper()]
    broken += [not name.startswith("a"), len(name) >= 12]
    return [f"strings.{index}" for index, fails in enumerate(broken) if fails]


@pytest.mark.parametrize("name", ["abc", "Abc", "a-b-c-d", "axe", "b", "abcdefghijklmno"])
def test_rules_calling_the_extension_get_cels_verdicts(name: str) -> None:
    pod: dict[str, Any] = {"metadata": {"name": name}, "spec": {"containers": []}}
    found = evaluate(pod, RULES)
    assert [violation.rule for violation in found] == _expected(name)
    assert all(violation.what == f"no: {name}" for violation in found)


def test_they_run_on_the_fast_path() -> None:
    for text in STRINGS:
        assert cel_cpp.boolean_program(text) is not None, text
    assert cel_cpp.mask_program(tuple(r.expression for r in RULES)) is not None


def test_a_process_whose_rules_never_call_it_does_not_load_it() -> None:
    script = (
        "import sys\n"
        "from secureml.profile.model import load_profile\n"
        "from secureml.rules import evaluate, rules_for_profile\n"
        "rules = rules_for_profile(load_profile('profiles/team-a.yaml'))\n"
        "pod = {'metadata': {'name': 'p'}, 'spec': {'containers': [{'name': 'c', 'image': 'i'}]}}\n"
        "assert evaluate(pod, rules)\n"
        "print(sorted(m for m in sys.modules if m.startswith('cel_expr_python')))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert "cel_expr_python.cel" in ran.stdout
    assert "ext_strings" not in ran.stdout
