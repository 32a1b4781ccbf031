"""The image builder on this machine: buildah, podman or docker, in that order (docs/images.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef

BUILDERS = ("buildah", "podman", "docker")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
INSTALL_HINT = (
    "install one: Debian/Ubuntu `apt-get install buildah` (no daemon needed), Fedora/RHEL "
    "`dnf install buildah` or `dnf install podman`, macOS `brew install podman`; or Docker"
)


def is_local_registry(registry: str) -> bool:
    """A registry on this machine, reached over plain HTTP."""
    return registry.rsplit(":", 1)[0] in _LOCAL_HOSTS or registry.startswith("[::1]")


@dataclass(frozen=True, slots=True)
class Builder:
    """One image builder found on PATH."""

    name: str
    path: str

    def build(
        self,
        context: Path,
        containerfile: Path,
        tag: str,
        build_args: Mapping[str, str] | None = None,
    ) -> None:
        """Build `containerfile` in `context` as `tag` (raise SecuremlError with its log's tail)."""
        command = [self.path]
        command += ["build", "--layers"] if self.name != "docker" else ["build"]
        if self.name == "buildah":
            command += ["--isolation", "chroot"]
        command += ["-f", str(containerfile), "-t", tag]
        for key, value in sorted((build_args or {}).items()):
            command += ["--build-arg", f"{key}={value}"]
        command.append(str(context))
        self._run(command, f"building {tag} with {self.name} failed")

    def push(self, tag: str, destination: ImageRef, *, compress: bool = True) -> str:
        """Push `tag` to `destination` (a tag reference); return the digest the registry holds.
        `compress=False` (buildah only) pushes the layers uncompressed: no gzip time, for a
        registry on this machine."""
        target = str(destination)
        local = is_local_registry(destination.registry)
        if self.name == "docker":
            self._run([self.path, "tag", tag, target], f"tagging {target} failed")
            self._run([self.path, "push", target], f"pushing {target} failed")
            out = self._run(
                [
                    self.path,
                    "inspect",
                    "--format",
                    "{{range .RepoDigests}}{{println .}}{{end}}",
                    tag,
                ],
                f"reading the digest of {target} failed",
            )
            for line in out.splitlines():
                if line.startswith(destination.name + "@"):
                    return line.split("@", 1)[1].strip()
            raise InputError(f"docker did not report the digest of {target}", why=out.strip())
        with tempfile.TemporaryDirectory(prefix="secureml-push-") as work:
            digest_file = Path(work) / "digest"
            command = [self.path, "push", "--digestfile", str(digest_file)]
            if local:
                command.append("--tls-verify=false")
            if not compress and self.name == "buildah":
                command.append("--disable-compression")
            command += [tag, f"docker://{target}"]
            self._run(command, f"pushing {target} with {self.name} failed")
            return digest_file.read_text().strip()

    def _run(self, command: Sequence[str], what: str) -> str:
        env = dict(os.environ)
        result = subprocess.run(list(command), capture_output=True, text=True, env=env)
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise InputError(
                what,
                why=tail or f"{self.name} exited {result.returncode}",
                fix=f"the command was: {' '.join(command)}",
            )
        return result.stdout


def find_builder(preferred: str | None = None) -> Builder:
    """The builder named by `preferred`, else the first of buildah, podman, docker on PATH."""
    names = (preferred,) if preferred else BUILDERS
    for name in names:
        if name not in BUILDERS:
            raise InputError(
                f"unknown image builder {name!r}",
                why=f"secureml drives {', '.join(BUILDERS)}",
                fix="pass --builder buildah, podman or docker",
            )
        path = shutil.which(name)
        if path:
            return Builder(name, path)
    raise InputError(
        f"no image builder found ({' or '.join(names)} on PATH)",
        why="building an image needs buildah, podman or docker",
        fix=INSTALL_HINT,
    )
