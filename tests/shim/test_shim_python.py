"""secureml.enforcement.shim_control: what the launcher calls, against the real library and files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.enforcement import shim_control as shim
from tests.support.fakegpu import REPO, MiB, compiler


def test_library_path_finds_the_build_or_says_how_to_make_one(monkeypatch, tmp_path) -> None:
    built = tmp_path / "libsecureml_shim.so"
    built.write_bytes(b"\x7fELF")
    monkeypatch.setenv(contract.ENV_SHIM_LIBRARY, str(built))
    assert shim.library_path() == built
    monkeypatch.setenv(contract.ENV_SHIM_LIBRARY, str(tmp_path / "absent.so"))
    with pytest.raises(SecuremlError) as caught:
        shim.library_path()
    assert "not built" in caught.value.what and "pip install" in caught.value.fix
    assert "absent.so" in caught.value.where


def test_child_env_arms_a_real_process(make_step, monkeypatch) -> None:
    step = make_step(memory=3 * MiB)
    monkeypatch.setenv(contract.ENV_SHIM_LIBRARY, str(step.shim))
    base = step.gpu.env({"PATH": os.environ["PATH"], "LD_PRELOAD": "/lib/other.so"})
    env = shim.child_env(step.limits_file, step.counters_file, base, log_level="error")
    assert env["LD_PRELOAD"] == f"{step.shim}:/lib/other.so"
    assert env[contract.ENV_SHIM_LIMITS_FILE] == str(step.limits_file)
    assert env[contract.ENV_SHIM_LOG_LEVEL] == "error"
    env["LD_PRELOAD"] = str(step.shim)  # /lib/other.so does not exist here
    result = subprocess.run(
        [str(step.driver), "fill", str(MiB)], env=env, capture_output=True, text=True
    )
    assert result.stdout.strip() == '{"total": 3145728}'
    counters = shim.read_counters(step.counters_file)
    assert counters["limits_ok"] is True and counters["error"] is None
    assert (
        counters["memory_limit"] == 3 * MiB
        and counters["compute_limit"] == 100
        and counters["scrub_on_free"] is True
    )
    assert counters["refused"] == 1 and counters["peak"] == 3 * MiB and counters["throttled"] == 0
    # `fill` exits holding its memory: at exit the driver still holds it, so the charge stays (the
    # next reconciliation with the driver releases it once the process is gone).
    assert counters["devices"] == [
        {
            "uuid": step.gpu.devices[0].uuid,
            "used": 3 * MiB,
            "peak": 3 * MiB,
            "refused": 1,
            "throttled": 0,
        }
    ]
    assert shim.region_path(step.limits_file).exists()
    shim.remove_region(step.limits_file)
    assert not shim.region_path(step.limits_file).exists()
    shim.remove_region(step.limits_file)  # idempotent


def test_child_env_rejects_an_unknown_log_level(make_step, monkeypatch) -> None:
    step = make_step(memory=MiB)
    monkeypatch.setenv(contract.ENV_SHIM_LIBRARY, str(step.shim))
    with pytest.raises(ValueError):
        shim.child_env(step.limits_file, log_level="loud")


def test_read_counters_reports_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SecuremlError, match="wrote no counters"):
        shim.read_counters(tmp_path / "none")
    bad = tmp_path / "counters"
    bad.write_text("version=1\nlimits_ok=1\n")
    with pytest.raises(SecuremlError, match="malformed"):
        shim.read_counters(bad)


def test_the_shipped_limits_renderer_is_accepted_by_the_shim(make_step, tmp_path) -> None:
    step = make_step(memory=MiB)
    step.limits_file.chmod(0o644)
    step.limits_file.write_text(
        contract.render_shim_limits(memory_bytes=5 * MiB, compute_percent=100, scrub_on_free=False)
    )
    assert step.run("fill", str(MiB)) == {"total": 5 * MiB}
    assert shim.read_counters(step.counters_file)["scrub_on_free"] is False


@pytest.mark.skipif(compiler() is None, reason="needs a C compiler")
def test_build_compiles_the_library(tmp_path: Path) -> None:
    built = shim.build(tmp_path)
    assert built == tmp_path / shim.LIBRARY_NAME and built.stat().st_size > 0
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True
    ).stdout
    for name in ("cuMemAlloc_v2", "cuGetProcAddress_v2", "dlsym", "nvmlDeviceGetMemoryInfo_v2"):
        assert f" T {name}\n" in symbols


def test_package_build_without_a_compiler_warns_and_continues(tmp_path: Path) -> None:
    """`setup.py build_py` with no compiler on PATH: the package builds, the shim is skipped with a
    clear warning, and nothing else breaks."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "CC": ""}
    (tmp_path / "python").symlink_to(sys.executable)
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING: no C compiler" in result.stderr
    assert (tmp_path / "lib" / "secureml" / "enforcement" / "shim_control.py").exists()
    # the C sources travel with the package: the shim can be built later, the simulator compiles the fakes
    shipped = tmp_path / "lib" / "secureml" / "enforcement"
    for source in (
        *(f"shim/{name}" for name in (*shim.SOURCES, *shim.HEADERS)),
        "shim/fake/fake_cuda.c",
        "shim/fake/fake_common.h",
    ):
        assert (shipped / source).read_bytes() == (REPO / "enforcement" / source).read_bytes()
    assert (shipped / "simulator.py").exists()
    assert not (tmp_path / "lib" / "secureml" / "enforcement" / shim.LIBRARY_NAME).exists()
