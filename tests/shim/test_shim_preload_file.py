"""Children started without the environment (`env -i`, as ssh or a daemon would start them) are
still held (issue 13 item 7): in a cluster the shim comes from /etc/ld.so.preload and the limits
from the compiled-in downward-API path, neither of which a child's environment can drop. Here a
private mount namespace puts a copy of /etc with an ld.so.preload naming the shim over /etc (only
the test's processes see it), and the shim is built with the test's limits file compiled in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from secureml.enforcement.shim_control import remove_region
from tests.support.fakegpu import CONFIG_ENV, MiB, build_shim


def test_env_i_children_are_held_by_the_preload_file_and_share_the_account(
    make_step, tmp_path: Path
) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-m", "true"]).returncode != 0:
        pytest.skip("needs unshare -m (root) for a private /etc/ld.so.preload")
    step = make_step(memory=8 * MiB)
    limits = tmp_path / "compiled-in-limits"
    limits.write_text(step.limits_file.read_text())
    shim = build_shim(
        flags=(f'-DSHIM_DEFAULT_LIMITS="{limits}"',), name="libsecureml_shim_preload.so"
    )
    etc = tmp_path / "etc"
    shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    (etc / "ld.so.preload").write_text(f"{shim}\n")
    # Only the fake machine's own variables survive env -i (they stand for the real driver being
    # installed); nothing of the shim's.
    machine = f"{CONFIG_ENV}={step.gpu.config_path} LD_LIBRARY_PATH={step.gpu.lib_dir}"
    script = f"""
set -e
mount --bind {etc} /etc
sleep 20 2>/dev/null | env -i {machine} {step.driver} hold {5 * MiB} > {tmp_path}/hold.out &
holder=$!
for i in $(seq 200); do grep -q ready {tmp_path}/hold.out 2>/dev/null && break; sleep 0.05; done
env -i {machine} {step.driver} fill {MiB}
kill $holder
"""
    try:
        result = subprocess.run(
            [unshare, "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        remove_region(limits)
    assert result.returncode == 0, result.stderr
    # The holder (5 MiB) and the env -i child shared one 8 MiB account: 3 MiB were left for it.
    assert result.stdout.strip().splitlines()[-1] == '{"total": 3145728}', result.stdout
    assert step.gpu.stats()["peak"] <= 8 * MiB
