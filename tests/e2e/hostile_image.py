"""A hostile step image, as a tenant could build it (tests/e2e/test_hostile_image.py).

FROM the session's step image, with everything in it that could put the image's code into the
platform's injected launcher or feed it a GPU of the image's making:

- its own `libnvidia-ml.so.1` and `libcuda.so.1` in `/hostile`, listed first in its own
  `/etc/ld.so.cache` (`ldconfig` over an `ld.so.conf.d` entry, run in the build), so that a
  lookup by soname finds them before the driver the node mounts;
- a gconv module and `gconv-modules` (GCONV_PATH), a locale folder (LOCPATH, LANG), an OpenSSL
  configuration that loads a provider module of its own (OPENSSL_CONF, OPENSSL_MODULES, and the
  same file over the default `/usr/lib/ssl/openssl.cnf`), and an NSS module named first in its
  `/etc/nsswitch.conf`, found through the same cache.

Every library has a constructor that writes `HOSTILE-CODE-LOADED <what> exe=<executable>` to
stderr (the container's log) when any process loads it. Built with buildah (`--isolation
chroot`) and pushed to the session's registry; `build_hostile_image` gives its pinned reference.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from tests.harness.controlplane import HarnessError

MARKER = "HOSTILE-CODE-LOADED"
ENV = {
    "GCONV_PATH": "/hostile/gconv",
    "LOCPATH": "/hostile/locale",
    "LANG": "C.HOSTILE",
    "OPENSSL_CONF": "/hostile/openssl.cnf",
    "OPENSSL_MODULES": "/hostile",
}
LIBRARY = r"""
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void hostile(void) {
    char line[512] = "HOSTILE-CODE-LOADED " WHAT " exe=";
    size_t n = strlen(line);
    ssize_t got = readlink("/proc/self/exe", line + n, sizeof line - n - 2);
    n += got > 0 ? (size_t)got : 0;
    line[n++] = '\n';
    (void)!write(2, line, n);
}
"""
# A GPU of the image's making, had its NVML been loaded: every call succeeds.
NVML = r"""
int nvmlInit_v2(void) { return 0; }
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 8; return 0; }
"""
OPENSSL_CNF = """openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
hostile = hostile_sect
default = default_sect
[hostile_sect]
module = /hostile/hostile-provider.so
activate = 1
[default_sect]
activate = 1
"""
GCONV_MODULES = """module HOSTILE// INTERNAL HOSTILE 1
module INTERNAL HOSTILE// HOSTILE 1
"""
NSSWITCH = """passwd: hostile files
group: hostile files
hosts: hostile files dns
"""
LIBRARIES = {  # file in /hostile -> (what, extra source, soname)
    "libnvidia-ml.so.1": ("nvml", NVML, "libnvidia-ml.so.1"),
    "libcuda.so.1": ("cuda", "", "libcuda.so.1"),
    "libnss_hostile.so.2": ("nss", "", "libnss_hostile.so.2"),
    "hostile-provider.so": ("openssl-provider", "", "hostile-provider.so"),
    "gconv/HOSTILE.so": ("gconv", "", "HOSTILE.so"),
}


def _run(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarnessError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def _context(folder: Path, base: str) -> None:
    hostile = folder / "hostile"
    (hostile / "gconv").mkdir(parents=True)
    (hostile / "locale").mkdir()
    for name, (what, extra, soname) in LIBRARIES.items():
        source = folder / f"{what}.c"
        source.write_text(LIBRARY + extra)
        _run(
            ["cc", "-shared", "-fPIC", "-O2", f'-DWHAT="{what}"', f"-Wl,-soname,{soname}",
             "-o", str(hostile / name), str(source)],
            f"compiling the hostile {what} library",
        )  # fmt: skip
    (hostile / "openssl.cnf").write_text(OPENSSL_CNF)
    (hostile / "gconv" / "gconv-modules").write_text(GCONV_MODULES)
    (folder / "00-hostile.conf").write_text("/hostile\n")
    (folder / "nsswitch.conf").write_text(NSSWITCH)
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    (folder / "Containerfile").write_text(
        f"""FROM {base}
USER 0
COPY hostile/ /hostile/
COPY 00-hostile.conf /etc/ld.so.conf.d/00-hostile.conf
COPY nsswitch.conf /etc/nsswitch.conf
COPY hostile/openssl.cnf /usr/lib/ssl/openssl.cnf
RUN ["/sbin/ldconfig"]
ENV {env}
USER 1000
"""
    )


def build_hostile_image(step_image: str, registry: str) -> str:
    """Build the hostile image FROM `step_image`, push it to `registry`; its pinned reference."""
    with tempfile.TemporaryDirectory(prefix="hostile-image-", dir="/var/tmp") as context:
        folder = Path(context)
        _context(folder, step_image)
        tag = "localhost/secureml-test/hostile-step"
        _run(
            ["buildah", "build", "--quiet", "--isolation", "chroot", "--tls-verify=false",
             "--format", "oci", "-t", tag, str(folder)],
            "building the hostile step image",
        )  # fmt: skip
        target = f"{registry}/secureml-test/hostile-step"
        _run(
            ["buildah", "push", "--quiet", "--tls-verify=false", "--digestfile",
             str(folder / "digest"), tag, f"docker://{target}:latest"],
            "pushing the hostile step image",
        )  # fmt: skip
        return f"{target}@{(folder / 'digest').read_text().strip()}"
