"""A hostile step image cannot get code into the platform's launcher or feed it a fake GPU
(issue 31; docs/threat-model.md, "The launcher and the shim from the platform's runtime image").

The `train` pod (a MIG instance of the node's fake GPU) as previewed, its image the hostile one of
tests/e2e/hostile_image.py (its own NVML and CUDA first in its own ld.so.cache, a gconv module, a
locale folder, an OpenSSL provider, an NSS module; the variables that name them in its image
config, which admission never sees), its step a probe. Under the injected launcher the probe
finds its parent, the launcher, and reads what it loaded (`/proc/<launcher>/maps`) and its
environment; then, as the control, loads `libnvidia-ml.so.1` by soname itself and gets the
image's (the attack is live in the image). Checked: the launcher mapped the driver the node
mounted and nothing of `/hostile`, ran with none of the image's variables (they were moved aside
and given back to the step), no constructor of the image ran in it, and its preflight and
scrub-before passed on the node's fake GPU.
"""

from __future__ import annotations

import pytest

from secureml.core import contract
from tests.e2e import hostile_image, stepruns
from tests.e2e.environment import E2E

pytestmark = [pytest.mark.node, pytest.mark.cluster]

DRIVER_DIR = "/usr/lib/x86_64-linux-gnu"  # where the node's fake device plugin mounts the driver
PROBE = r"""
import ctypes, json, os
def status(pid, key):
    return next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith(key + ":"))
pid, launcher = os.getppid(), None
while pid > 1 and launcher is None:
    try:
        if os.readlink(f"/proc/{pid}/exe") == "/opt/secureml/python/bin/python3":
            launcher = pid
    except OSError:
        pass
    pid = int(status(pid, "PPid"))
maps = sorted({l.split()[-1] for l in open(f"/proc/{launcher}/maps") if l.split()[-1].startswith("/")})
raw = open(f"/proc/{launcher}/environ", "rb").read().decode()
env = dict(e.split("=", 1) for e in raw.split("\0") if "=" in e)
ctypes.CDLL("libnvidia-ml.so.1")  # the control: the image's own lookup by soname
mine = [l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l]
keys = ("GCONV_PATH", "LOCPATH", "LANG", "LC_ALL", "OPENSSL_CONF", "OPENSSL_MODULES")
print("HOSTILE-PROBE " + json.dumps({
    "launcher": launcher, "maps": maps,
    "launcher_env": {k: v for k, v in env.items() if k in keys or k.startswith("SECUREML_STEP_ENV_")},
    "step_env": {k: os.environ.get(k) for k in keys}, "step_nvml": sorted(set(mine)),
}), flush=True)
"""


@pytest.fixture(scope="module")
def hostile(e2e: E2E) -> str:
    return hostile_image.build_hostile_image(e2e.step_image, e2e.registry)


def test_a_hostile_image_gets_no_code_into_the_launcher(
    e2e: E2E, hostile: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    compiled = stepruns.compile_pods(e2e, tmp_path_factory.mktemp("compile"))
    pod = stepruns.with_step(compiled.pod("train", "hostile-train"), ["python3", "-c", PROBE])
    main = stepruns.main_container(pod)
    before = (main["image"], main["image"].split("@", 1)[1])
    after = (hostile, hostile.split("@", 1)[1])
    main["image"] = hostile
    pod["metadata"]["annotations"][contract.ANNOTATION_IMAGE_DIGEST] = after[1]
    for variable in main["env"]:  # the launcher's record of the image (SECUREML_IMAGE*)
        for old, new in zip(before, after, strict=True):
            if variable.get("value") == old:
                variable["value"] = new
    ran = stepruns.run(e2e, pod, "train")
    assert ran.pod["status"]["phase"] == "Succeeded", ran.explain()
    (seen,) = ran.lines("HOSTILE-PROBE ")
    print(f"\nhostile image: pod Succeeded in {ran.seconds:.1f} s; launcher maps "
          f"{[m for m in seen['maps'] if 'nvidia' in m or 'cuda' in m]}")  # fmt: skip

    # the control: in the image, a lookup by soname gets the image's NVML
    assert seen["step_nvml"] == ["/hostile/libnvidia-ml.so.1"], seen["step_nvml"]
    markers = [ln for ln in ran.log.splitlines() if ln.startswith(hostile_image.MARKER)]
    assert markers and all(" exe=/opt/secureml/" not in ln for ln in markers), markers

    # the launcher: the node's driver, nothing of /hostile
    assert seen["launcher"], seen
    assert not [m for m in seen["maps"] if m.startswith("/hostile")], seen["maps"]
    for library in ("libnvidia-ml.so.1", "libcuda.so.1"):
        assert f"{DRIVER_DIR}/{library}" in seen["maps"], (library, seen["maps"])
    # its environment: none of the image's loader, locale and OpenSSL variables
    env = seen["launcher_env"]
    assert env.get("LC_ALL") == "C", env
    assert env.get("OPENSSL_CONF") == f"{contract.RUNTIME_DIR}/etc/openssl.cnf", env
    for name, value in hostile_image.ENV.items():
        if name != "OPENSSL_CONF":
            assert name not in env, env
        assert env[f"SECUREML_STEP_ENV_{name}"] == value, env  # moved aside
        assert seen["step_env"][name] == value, seen["step_env"]  # and given back to the step
    assert seen["step_env"]["LC_ALL"] is None, seen[
        "step_env"
    ]  # the launcher's own, not the step's

    stages = {name: stage["status"] for name, stage in ran.stages().items()}
    assert stages["preflight"] == stages["scrub-before"] == stages["scrub-after"] == "ok", stages
    assert stages["identity"] == "ok", stages
