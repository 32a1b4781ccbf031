"""The injected launcher against a hostile step image, in isolation (the node test is
tests/e2e/test_hostile_image.py):

- `enforcement.driver.library`: on the injected interpreter, the GPU driver's libraries only from
  a copy the node mounted (a mount point in mountinfo), never the image's own file;
- the injected entry (images/runtime-injector/launch.c, compiled here with a stand-in
  interpreter that prints its environment) moves the image's loader, locale and OpenSSL variables
  aside and `launch.step_environment` gives them back to the step, and only them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement import driver, launch

REPO = Path(__file__).resolve().parents[2]
LAUNCH_C = REPO / "images" / "runtime-injector" / "launch.c"


def _mountinfo(tmp_path: Path, *points: str) -> str:
    lines = [
        f"{36 + i} 25 0:{40 + i} / {p.replace(' ', chr(92) + '040')} ro,relatime - tmpfs tmpfs ro"
        for i, p in enumerate(points)
    ]
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def injected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    monkeypatch.setattr(sys, "executable", contract.RUNTIME_PYTHON)
    folders = [tmp_path / "lib x86", tmp_path / "lib64"]
    for folder in folders:
        folder.mkdir()
    monkeypatch.setattr(driver, "DRIVER_DIRS", tuple(str(f) for f in folders))
    return folders


def test_outside_the_injected_runtime_the_soname_is_used(tmp_path: Path) -> None:
    assert sys.executable != contract.RUNTIME_PYTHON
    assert driver.library("libcuda.so.1", mountinfo=_mountinfo(tmp_path)) == "libcuda.so.1"


def test_the_injected_launcher_loads_the_copy_the_node_mounted(
    injected: list[Path], tmp_path: Path
) -> None:
    image_copy = injected[0] / "libnvidia-ml.so.1"  # the image's, first in the search order
    mounted = injected[1] / "libnvidia-ml.so.1"
    image_copy.write_text("image")
    mounted.write_text("node")
    info = _mountinfo(tmp_path, "/", str(mounted))
    assert driver.library("libnvidia-ml.so.1", mountinfo=info) == str(mounted)


def test_a_link_to_the_mounted_file_is_followed(injected: list[Path], tmp_path: Path) -> None:
    versioned = injected[0] / "libcuda.so.550.54"
    versioned.write_text("node")
    (injected[0] / "libcuda.so.1").symlink_to(versioned.name)  # the toolkit's soname link
    info = _mountinfo(tmp_path, str(versioned))
    assert driver.library("libcuda.so.1", mountinfo=info) == str(versioned)


def test_the_images_own_copy_is_never_loaded(injected: list[Path], tmp_path: Path) -> None:
    (injected[0] / "libnvidia-ml.so.1").write_text("image")
    with pytest.raises(OSError) as raised:
        driver.library("libnvidia-ml.so.1", mountinfo=_mountinfo(tmp_path, "/"))
    message = str(raised.value)
    assert "no libnvidia-ml.so.1 mounted by the node" in message
    assert f"the image's own copies are not loaded: {injected[0]}/libnvidia-ml.so.1" in message


def test_none_at_all_fails_closed(injected: list[Path], tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no libcuda.so.1 mounted by the node"):
        driver.library("libcuda.so.1", mountinfo=_mountinfo(tmp_path, "/"))


def test_the_step_gets_back_what_was_moved_aside_and_nothing_else() -> None:
    environ = {
        "PATH": "/usr/bin",
        "LC_ALL": "C",  # the entry's, for the launcher only
        "OPENSSL_CONF": f"{contract.RUNTIME_DIR}/etc/openssl.cnf",
        "SECUREML_STEP_ENV_LANG": "fr_FR.UTF-8",
        "SECUREML_STEP_ENV_GCONV_PATH": "/hostile/gconv",
        "SECUREML_STEP_ENV_OPENSSL_MODULES": "/hostile",
        "SECUREML_STEP_ENV_LD_PRELOAD": "/hostile/x.so",  # not a moved-aside name: dropped
    }
    assert launch.step_environment(environ, injected=True) == {
        "PATH": "/usr/bin",
        "LANG": "fr_FR.UTF-8",
        "GCONV_PATH": "/hostile/gconv",
        "OPENSSL_MODULES": "/hostile",
    }
    assert launch.step_environment(environ, injected=False) == environ


def _entry(tmp_path: Path) -> Path:
    """launch.c built against a runtime folder whose `python3` prints its environment."""
    runtime = tmp_path / "runtime"
    (runtime / "python" / "bin").mkdir(parents=True)
    interpreter = runtime / "python" / "bin" / "python3"
    interpreter.write_text("#!/bin/sh\nexec env -0\n")
    interpreter.chmod(0o755)
    binary = tmp_path / "secureml-launch"
    done = subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", f'-DRUNTIME_DIR="{runtime}"',
         "-o", str(binary), str(LAUNCH_C)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(done.stderr)
    return binary


def test_the_entry_moves_the_images_variables_aside(tmp_path: Path) -> None:
    binary = _entry(tmp_path)
    image_env = {
        "PATH": "/usr/bin:/bin",
        "GCONV_PATH": "/hostile/gconv",
        "LOCPATH": "/hostile/locale",
        "LANG": "C.HOSTILE",
        "LC_CTYPE": "C.HOSTILE",
        "OPENSSL_CONF": "/hostile/openssl.cnf",
        "OPENSSL_MODULES": "/hostile",
        "GLIBC_TUNABLES": "glibc.malloc.check=3",
        "LD_PRELOAD": "/hostile/x.so",
        "PYTHONPATH": "/hostile",
        "SECUREML_STEP_ENV_LD_PRELOAD": "/hostile/x.so",  # a forged stash: dropped
        "SECUREML_ISOLATION": "mig",
    }
    done = subprocess.run(
        [str(binary), "--", "true"], env=image_env, capture_output=True, check=True
    )
    seen = dict(e.split("=", 1) for e in done.stdout.decode().split("\0") if "=" in e)
    seen.pop("PWD", None)  # the stand-in interpreter's shell sets it
    runtime = tmp_path / "runtime"
    assert seen == {
        "PATH": "/usr/bin:/bin",
        "SECUREML_ISOLATION": "mig",
        "SECUREML_STEP_ENV_GCONV_PATH": "/hostile/gconv",
        "SECUREML_STEP_ENV_LOCPATH": "/hostile/locale",
        "SECUREML_STEP_ENV_LANG": "C.HOSTILE",
        "SECUREML_STEP_ENV_LC_CTYPE": "C.HOSTILE",
        "SECUREML_STEP_ENV_OPENSSL_CONF": "/hostile/openssl.cnf",
        "SECUREML_STEP_ENV_OPENSSL_MODULES": "/hostile",
        "SECUREML_STEP_ENV_GLIBC_TUNABLES": "glibc.malloc.check=3",
        "LC_ALL": "C",
        "OPENSSL_CONF": f"{runtime}/etc/openssl.cnf",
    }
    # and the step, started by the launcher, gets the image's values back
    step = launch.step_environment(seen, injected=True)
    assert {k: step[k] for k in ("GCONV_PATH", "LANG", "OPENSSL_CONF", "GLIBC_TUNABLES")} == {
        "GCONV_PATH": "/hostile/gconv",
        "LANG": "C.HOSTILE",
        "OPENSSL_CONF": "/hostile/openssl.cnf",
        "GLIBC_TUNABLES": "glibc.malloc.check=3",
    }
    assert "LC_ALL" not in step and "LD_PRELOAD" not in step
