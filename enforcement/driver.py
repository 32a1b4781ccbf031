"""Which copy of the GPU driver's libraries (`libnvidia-ml.so.1`, `libcuda.so.1`) the launcher loads.

By soname, the dynamic loader looks in the step image's own `/etc/ld.so.cache` before the
library folders, so an image that lists a folder of its own there (`ldconfig` in its build) has
its own `libnvidia-ml.so.1` loaded into the launcher: its code runs in the platform's process and
answers for the GPU. Where the launcher is the platform's injected runtime (its interpreter is
`contract.RUNTIME_PYTHON`, from the read-only runtime volume), it therefore loads a driver library
only by the absolute path of a copy the node mounted into the container (the NVIDIA container
toolkit, CDI or the device plugin bind-mount the driver's files: each is a mount point in
`/proc/self/mountinfo`), looked for in `DRIVER_DIRS`; a copy that is the image's own file is never
loaded, and with none mounted the GPU stages fail closed. Where the launcher comes from the step's
image (no `runtime.image`), the image is the launcher too and the soname is used as before.
"""

from __future__ import annotations

import os
import sys

from secureml.core import contract

# Where the NVIDIA container toolkit mounts the driver's libraries: the host's library folder
# (Debian and Ubuntu hosts, then RHEL-family ones, then Arm hosts).
DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu")
MOUNTINFO = "/proc/self/mountinfo"


def injected() -> bool:
    """True when this launcher runs on the platform's injected interpreter."""
    return sys.executable == contract.RUNTIME_PYTHON


def _unescape(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are written as octal escapes."""
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, plain)
    return field


def mount_points(mountinfo: str = MOUNTINFO) -> set[str]:
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as handle:
        return {_unescape(line.split()[4]) for line in handle if len(line.split()) > 4}


def library(soname: str, *, mountinfo: str = MOUNTINFO) -> str:
    """What to hand `ctypes.CDLL` for the driver library `soname` (see the module docstring);
    OSError naming the folders looked in when the injected launcher finds no mounted copy."""
    if not injected():
        return soname
    mounted = mount_points(mountinfo)
    seen = []
    for folder in DRIVER_DIRS:
        candidate = os.path.join(folder, soname)
        if not os.path.lexists(candidate):
            continue
        real = os.path.realpath(candidate)
        if real in mounted:
            return real
        seen.append(f"{candidate} -> {real}" if real != candidate else candidate)
    found = f"; the image's own copies are not loaded: {', '.join(seen)}" if seen else ""
    raise OSError(
        f"no {soname} mounted by the node in {', '.join(DRIVER_DIRS)}{found} "
        "(the NVIDIA container toolkit or the device plugin mounts the driver into a pod "
        "that requested a GPU)"
    )
