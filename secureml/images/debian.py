"""A Debian base image from Debian's own mirror, without a registry (docs/images.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from secureml.core.errors import InputError
from secureml.images.context import cache_dir

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"


def base_tag(suite: str = SUITE) -> str:
    return f"localhost/secureml/debian:{suite}"


def _run(command: list[str], what: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise InputError(what, why=tail or f"exit {result.returncode}", fix=" ".join(command))
    return result.stdout.strip()


def rootfs(suite: str = SUITE, mirror: str = MIRROR) -> Path:
    """The cached minbase root filesystem of `suite` (debootstrap on the first call)."""
    target = cache_dir() / "rootfs" / suite
    if (target / ".complete").is_file():
        return target
    if shutil.which("debootstrap") is None:
        raise InputError(
            "debootstrap is not installed",
            why="the Debian base image is built from Debian's mirror with debootstrap",
            fix="apt-get install debootstrap, or build FROM a registry's debian image (--base)",
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _run(
        ["debootstrap", "--variant=minbase", suite, str(partial), mirror],
        f"debootstrap of Debian {suite} failed",
    )
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (partial / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").write_text(mirror + "\n")
    return target


def base_image(suite: str = SUITE, mirror: str = MIRROR) -> str:
    """`localhost/secureml/debian:<suite>` in buildah's storage (committed from `rootfs`)."""
    tag = base_tag(suite)
    buildah = shutil.which("buildah")
    if buildah is None:
        raise InputError(
            "buildah is not installed",
            why="the Debian base image is committed into buildah's local storage",
            fix="apt-get install buildah",
        )
    if (
        subprocess.run([buildah, "inspect", "--type", "image", tag], capture_output=True).returncode
        == 0
    ):
        return tag
    source = rootfs(suite, mirror)
    container = _run([buildah, "from", "scratch"], "buildah from scratch failed")
    try:
        mount = _run([buildah, "mount", container], "buildah mount failed (it needs root)")
        pack = subprocess.Popen(
            ["tar", "-C", str(source), "--exclude", "./.complete", "-cf", "-", "."],
            stdout=subprocess.PIPE,
        )
        unpack = subprocess.run(["tar", "-C", mount, "-xf", "-"], stdin=pack.stdout)
        if pack.wait() != 0 or unpack.returncode != 0:
            raise InputError(f"copying {source} into the image failed", why="tar failed")
        _run([buildah, "umount", container], "buildah umount failed")
        _run([buildah, "config", "--cmd", "/bin/bash", container], "buildah config failed")
        _run([buildah, "commit", "-q", container, tag], f"committing {tag} failed")
    finally:
        subprocess.run([buildah, "rm", container], capture_output=True)
    return tag
