"""`compile_pipeline(..., keep_component=False)` (the CLI's): the same YAML and report, no
component, and kfp's built pipeline released before the admission check runs; the CLI's frozen
heap is unfrozen when the command ends."""

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from secureml.compile import compiler
from secureml.compile.pipeline_loader import load_pipeline
from tests.support.compiled import COMPONENTS_SOURCE
from tests.support.profiles import make_profile, profile_data

CHAIN = (
    COMPONENTS_SOURCE
    + """
@dsl.pipeline(name="chain")
def chain(x: int = 0) -> None:
    train(x=prepare(x=x).output)
"""
)


@pytest.fixture
def chain_file(tmp_path: Path) -> Path:
    path = tmp_path / "chain.py"
    path.write_text(CHAIN)
    return path


def test_released_build_gives_the_same_output(
    monkeypatch: pytest.MonkeyPatch, chain_file: Path
) -> None:
    chain = load_pipeline(chain_file)
    profile = make_profile()
    kept = compiler.compile_pipeline(chain, profile)
    built: list[weakref.ref[Any]] = []
    alive_at_check: list[bool] = []
    secure_graph, check_admission = compiler._secure_graph, compiler._check_admission

    def tracked(*args: Any, **kwargs: Any) -> Any:
        graph = secure_graph(*args, **kwargs)
        built.append(weakref.ref(graph))
        return graph

    def check(*args: Any, **kwargs: Any) -> None:
        alive_at_check.append(built[0]() is not None)
        check_admission(*args, **kwargs)

    monkeypatch.setattr(compiler, "_secure_graph", tracked)
    monkeypatch.setattr(compiler, "_check_admission", check)
    released = compiler.compile_pipeline(chain, profile, keep_component=False)
    assert kept.component is not None and released.component is None
    assert released.yaml_text == kept.yaml_text
    assert released.report() == kept.report()
    assert alive_at_check == [False]


def test_the_cli_leaves_the_heap_unfrozen(tmp_path: Path, chain_file: Path) -> None:
    """`compile` freezes the loaded heap while it compiles, and unfreezes it after (it may run
    inside another program, here a CliRunner)."""
    (tmp_path / "team.yaml").write_text(json.dumps(profile_data()))
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    try:
        result = CliRunner().invoke(
            app,
            [
                "compile",
                str(chain_file),
                "--profile",
                str(tmp_path / "team.yaml"),
                "-o",
                str(tmp_path / "chain.yaml"),
            ],
        )
        assert result.exit_code == 0, result.output
        assert gc.get_freeze_count() == 0
    finally:
        if frozen:
            gc.freeze()
