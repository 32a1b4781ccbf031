"""Issue 34, point 8: the profiles the project ships follow its own advice.

Every profile under profiles/ and examples/profiles/ validates with exit 0 and prints no warning:
a digest-pinned platform runtime image (`spec.runtime.image`), a quota entry for every time-sliced
resource; none is an exception (team-a, the profile most suites write their pods for, included).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*REPO.glob("profiles/*.yaml"), *REPO.glob("examples/profiles/*.yaml")])

runner = CliRunner()


def test_the_shipped_profiles_are_found() -> None:
    names = {str(path.relative_to(REPO)) for path in SHIPPED}
    assert {"profiles/team-a.yaml", "profiles/team-conf.yaml", "profiles/team-dra.yaml",
            "profiles/team-restricted.yaml", "examples/profiles/team-a-dev.yaml",
            "examples/profiles/permissive.yaml"} <= names  # fmt: skip


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_profile_validates_without_a_warning(path: Path) -> None:
    result = runner.invoke(app, ["profile", "validate", str(path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith(f"{path}: ok ("), result.output
    warnings = [line.removeprefix(f"{path}: ") for line in lines[1:]]
    assert warnings == [], result.output
