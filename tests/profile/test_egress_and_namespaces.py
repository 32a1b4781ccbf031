"""Open egress (`0.0.0.0/0`) is refused on every port for tiers confidential and restricted and
named otherwise; two profiles for one namespace are named by validate and refused by render."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import ProfileError
from secureml.profile.model import load_profile

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, name: str, source: str, **spec: Any) -> Path:
    data = yaml.safe_load((ROOT / "profiles" / f"{source}.yaml").read_text())
    data["spec"].update(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("source", ["team-conf", "team-restricted"])
@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0"])
def test_strict_tiers_refuse_egress_everywhere_on_every_port(
    tmp_path: Path, source: str, cidr: str
) -> None:
    path = _write(tmp_path, "open", source, network={"egress": [{"cidr": cidr}]})
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    (problem,) = [p for p in err.value.problems if p[0] == "spec.network.egress[0]"]
    assert "forbids egress to every address on every port" in problem[1]


def test_open_egress_the_tier_allows_is_named_by_validate(tmp_path: Path) -> None:
    internal = _write(tmp_path, "internal", "team-a", network={"egress": [{"cidr": "0.0.0.0/0"}]})
    strict = _write(
        tmp_path, "conf", "team-conf", network={"egress": [{"cidr": "0.0.0.0/0", "ports": [443]}]}
    )
    result = CliRunner().invoke(app, ["profile", "validate", str(internal), str(strict)])
    assert result.exit_code == 0, result.output
    assert (
        f"{internal}: warning: spec.network.egress[0]: 0.0.0.0/0 lets every step reach any "
        "address on every port" in result.output
    )
    assert f"{strict}: warning: spec.network.egress[0]: 0.0.0.0/0 lets every step reach any " in (
        result.output
    )
    assert "on ports 443" in result.output
    plain = CliRunner().invoke(app, ["profile", "validate", str(ROOT / "profiles" / "team-a.yaml")])
    assert "spec.network.egress" not in plain.output  # (its warning: runtime.image unset)


def test_two_profiles_for_one_namespace(tmp_path: Path) -> None:
    first = ROOT / "profiles" / "team-a.yaml"
    second = _write(tmp_path, "other", "team-a")  # same namespace, same tenant name
    runner = CliRunner()
    validated = runner.invoke(app, ["profile", "validate", str(first), str(second)])
    assert validated.exit_code == 0, validated.output
    assert "warning: namespace team-a is the namespace of 2 profiles: " in validated.output
    out = tmp_path / "out"
    rendered = runner.invoke(app, ["profile", "render", str(first), str(second), "-o", str(out)])
    assert rendered.exit_code == 2, rendered.output
    assert "namespace team-a is the namespace of 2 profiles" in rendered.output
    assert "Traceback" not in rendered.output
    assert not out.exists(), "nothing was written"
