"""`cel_cache`: a program read back is the program compiled, and a cache folder that is not the
user's alone is not used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from secureml.rules.cel import cache as cel_cache
from secureml.rules.cel import cpp as cel_cpp

EXPRESSION = "object.spec.containers.all(c, c.name.startsWith('a'))"
POD = {"spec": {"containers": [{"name": "a1"}, {"name": "b"}]}}


class Counting:
    """The engine's compile, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, expression: str) -> Any:
        self.calls += 1
        return cel_cpp._env().compile(expression)


def load(compile_program: Counting, expression: str = EXPRESSION) -> Any:
    return cel_cache.load(expression, compile_program, cel_cpp._env().deserialize)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SECUREML_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cel"


def value(program: Any) -> Any:
    return program.eval(cel_cpp.activation(POD, None)).value()


def test_a_program_read_back_is_the_one_compiled(cache: Path) -> None:
    compiled = Counting()
    first = load(compiled)
    second = load(compiled)
    assert compiled.calls == 1  # the second came from the cache
    assert value(first) is value(second) is False
    assert len(list(cache.glob("*.bin"))) == 1
    assert cache.stat().st_mode & 0o777 == 0o700
    load(compiled, EXPRESSION.replace("'a'", "'b'"))  # another text: another entry
    assert compiled.calls == 2


def test_a_cut_short_file_is_compiled_again_and_replaced(cache: Path) -> None:
    compiled = Counting()
    load(compiled)
    (entry,) = cache.glob("*.bin")
    entry.write_bytes(entry.read_bytes()[:40])
    assert value(load(compiled)) is False and compiled.calls == 2
    assert value(load(compiled)) is False and compiled.calls == 2  # replaced whole


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_a_folder_others_may_write_is_not_used(cache: Path, mode: int) -> None:
    cache.mkdir(parents=True)
    os.chmod(cache, mode)
    compiled = Counting()
    load(compiled)
    load(compiled)
    assert compiled.calls == 2 and not list(cache.glob("*.bin"))


def test_a_file_others_may_write_is_not_read(cache: Path) -> None:
    compiled = Counting()
    load(compiled)
    (entry,) = cache.glob("*.bin")
    os.chmod(entry, 0o666)
    load(compiled)
    assert compiled.calls == 2


def test_off_compiles_every_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SECUREML_CACHE_DIR", "off")
    compiled = Counting()
    load(compiled)
    load(compiled)
    assert compiled.calls == 2


@pytest.mark.skipif(os.getuid() != 0, reason="giving the folder to another user needs root")
def test_a_folder_another_user_owns_is_not_used(cache: Path) -> None:
    cache.mkdir(parents=True, mode=0o700)
    os.chown(cache, 65534, 65534)
    compiled = Counting()
    load(compiled)
    load(compiled)
    assert compiled.calls == 2 and not list(cache.glob("*.bin"))


def test_the_key_names_the_engines_version_and_compiled_modules() -> None:
    from importlib import metadata

    from cel_expr_python import cel  # type: ignore[import-untyped]

    build = cel_cache._engine()
    assert f"cel_expr_python-{metadata.version('cel-expr-python')}.dist-info" in build
    status = os.stat(cel.__file__)
    assert f"{cel.__file__}:{status.st_size}:{status.st_mtime_ns}" in build


def test_another_engine_build_reads_no_program_of_this_one(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = Counting()
    load(compiled)
    monkeypatch.setattr(cel_cache, "_engine", lambda: "another build")
    load(compiled)
    assert compiled.calls == 2  # compiled again, under another key
    assert len(list(cache.glob("*.bin"))) == 2


def test_a_json_value_is_computed_once_and_a_cut_short_one_again(cache: Path) -> None:
    calls: list[int] = []

    def compute() -> Any:
        calls.append(1)
        return {"object": [0, 0, None, {"spec": 1}]}

    first = cel_cache.load_json("reads:test", EXPRESSION, compute)
    assert cel_cache.load_json("reads:test", EXPRESSION, compute) == first and len(calls) == 1
    assert cel_cache.load_json("reads:other", EXPRESSION, compute) == first and len(calls) == 2
    for path in cache.glob("*.json"):
        path.write_bytes(path.read_bytes()[:5])
    assert cel_cache.load_json("reads:test", EXPRESSION, compute) == first and len(calls) == 3
    assert cel_cache.load_json("reads:test", EXPRESSION, compute) == first and len(calls) == 3
