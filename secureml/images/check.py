"""Whether an image can run a secure step, or serve as the platform's runtime image."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Literal

from secureml.core import contract
from secureml.images.context import SECUREML_VERSION
from secureml.images.oci import Image, open_image

Status = Literal["ok", "problem", "info"]
KIND_LABEL = "dev.secureml.image.kind"
RUNTIME_KIND = "runtime-injector"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GPU_SELECTING_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA")
_SITE_DIRS = ("dist-packages", "site-packages")
_VERSION_RE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
PAYLOAD_FILES = ("install", "bin/secureml-launch", "lib/libsecureml_shim.so", "python/bin/python3")


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: Status
    message: str
    fix: str = ""


def compatible(version: str, ours: str = SECUREML_VERSION) -> bool:
    """Same major and minor version (0.x minors may change the contract)."""
    return version.split(".")[:2] == ours.split(".")[:2]


def wanted(path: str) -> bool:
    """The files whose content the checks read."""
    return (
        path in ("/etc/passwd", contract.SHIM_PRELOAD_FILE)
        or path == f"{contract.RUNTIME_PAYLOAD_DIR}/manifest.json"
        or path.endswith("/secureml/__init__.py")
    )


def _site_dirs(image: Image) -> list[str]:
    """Every dist-/site-packages folder of the image's Pythons (layers need not list folders)."""
    found = set()
    for path in image.files.entries:
        parts = path.split("/")
        for index, part in enumerate(parts[:-1]):
            if part in _SITE_DIRS:
                found.add("/".join(parts[: index + 1]))
    return sorted(found)


def _find_package_file(image: Image, relative: str) -> str | None:
    for site in _site_dirs(image):
        candidate = f"{site}/{relative}"
        if image.files.get(candidate) is not None:
            return candidate
    return None


def _user(image: Image) -> Finding:
    user = str(image.runtime_config.get("User") or "")
    name = user.split(":", 1)[0]
    fix = "end the Containerfile with USER 1000:1000 (a numeric, non-root uid)"
    if not name or name in ("0", "root"):
        return Finding("user", "problem", f"the image runs as root (USER {user or 'unset'})", fix)
    if not name.isdigit():
        passwd = (image.files.read("/etc/passwd") or b"").decode(errors="replace")
        uid = next((ln.split(":")[2] for ln in passwd.splitlines() if ln.split(":")[0] == name), "")
        if uid in ("", "0"):
            return Finding("user", "problem", f"USER {name} is root or unknown in /etc/passwd", fix)
        return Finding(
            "user",
            "problem",
            f"USER {name} is a name (uid {uid}); runAsNonRoot can only verify a numeric USER",
            fix,
        )
    return Finding("user", "ok", f"runs as uid {name}")


def _gpu_env(image: Image) -> Finding:
    names = {str(e).split("=", 1)[0] for e in image.runtime_config.get("Env") or []}
    set_here = sorted(names.intersection(GPU_SELECTING_ENV))
    if set_here:
        return Finding(
            "gpu-env",
            "problem",
            f"the image sets {', '.join(set_here)}: the NVIDIA toolkit may expose GPUs from it",
            "remove them (ENV NVIDIA_VISIBLE_DEVICES= does not remove it; rebuild FROM secureml's "
            "cuda image, which sets none)",
        )
    return Finding("gpu-env", "ok", "selects no GPU through its environment")


def _preload(image: Image) -> Finding:
    entry = image.files.get(contract.SHIM_PRELOAD_FILE)
    if entry is None:
        return Finding("ld-preload", "ok", f"no {contract.SHIM_PRELOAD_FILE}")
    content = (entry.content or b"").strip()
    if content:
        return Finding(
            "ld-preload",
            "problem",
            f"{contract.SHIM_PRELOAD_FILE} preloads {content.decode(errors='replace')!r} into "
            "every process of the step",
            f"leave {contract.SHIM_PRELOAD_FILE} empty: the platform mounts its own over it",
        )
    return Finding("ld-preload", "ok", f"{contract.SHIM_PRELOAD_FILE} is empty")


def _python(image: Image) -> Finding:
    env = dict(str(e).split("=", 1) for e in image.runtime_config.get("Env") or [] if "=" in str(e))
    for folder in env.get("PATH", DEFAULT_PATH).split(":"):
        entry = image.files.get(posixpath.join(folder or "/", "python3"))
        if entry is not None and entry.kind == "file" and entry.mode & 0o111:
            return Finding("python", "ok", f"python3 at {folder}/python3")
    return Finding(
        "python",
        "problem",
        "no python3 on the image's PATH: kfp's executor cannot start",
        "build FROM secureml's runtime or cuda image (secureml image build --from runtime)",
    )


def _executor(image: Image) -> Finding:
    found = _find_package_file(image, "kfp/dsl/executor_main.py")
    if found is None:
        return Finding(
            "kfp-executor",
            "problem",
            "kfp is not installed: the step's command (python3 -m kfp.dsl.executor_main) fails, "
            "and installing it at start is refused",
            "build FROM secureml's runtime image, or pip install kfp in the image",
        )
    return Finding("kfp-executor", "ok", f"kfp at {posixpath.dirname(posixpath.dirname(found))}")


def _runtime_in_image(image: Image, injected: bool) -> list[Finding]:
    """The launcher and shim inside the step image: needed only where nothing injects them."""
    if injected:
        return [
            Finding(
                "launcher",
                "info",
                f"the launcher and the shim are injected from the profile's runtime image "
                f"({contract.RUNTIME_LAUNCHER}); the image's own copies are not used",
            )
        ]
    findings = []
    init = _find_package_file(image, "secureml/__init__.py")
    launch = _find_package_file(image, "secureml/enforcement/launch.py")
    if init is None or launch is None:
        findings.append(
            Finding(
                "launcher",
                "problem",
                f"secureml's launcher is not installed: `{' '.join(contract.LAUNCHER_PREFIX)}` "
                "cannot start",
                "build FROM secureml's runtime image, or name a runtime.image in the profile",
            )
        )
    else:
        match = _VERSION_RE.search((image.files.read(init) or b"").decode(errors="replace"))
        version = match.group(1) if match else "unknown"
        if compatible(version):
            findings.append(Finding("launcher", "ok", f"secureml {version} at {init}"))
        else:
            findings.append(
                Finding(
                    "launcher",
                    "problem",
                    f"secureml {version} in the image; this compiler ({SECUREML_VERSION}) "
                    "needs the same major.minor",
                    "rebuild the image FROM the runtime image of this secureml version",
                )
            )
    shim = image.files.get(contract.SHIM_LIBRARY_PATH)
    if shim is None or shim.kind != "file":
        findings.append(
            Finding(
                "shim",
                "problem",
                f"no quota shim at {contract.SHIM_LIBRARY_PATH} (what /etc/ld.so.preload names)",
                "build FROM secureml's runtime image",
            )
        )
    else:
        findings.append(Finding("shim", "ok", f"shim at {contract.SHIM_LIBRARY_PATH}"))
    return findings


def _entrypoint_step(image: Image) -> Finding:
    entrypoint = image.runtime_config.get("Entrypoint") or []
    if entrypoint:
        return Finding(
            "entrypoint",
            "info",
            f"ENTRYPOINT {json.dumps(entrypoint)} is not run: the step's command replaces it",
        )
    return Finding("entrypoint", "ok", "no ENTRYPOINT (the step's command runs as compiled)")


def check_step_image(image: Image, *, injected: bool) -> list[Finding]:
    return [
        _python(image),
        _executor(image),
        *_runtime_in_image(image, injected),
        _user(image),
        _preload(image),
        _gpu_env(image),
        _entrypoint_step(image),
    ]


def check_runtime_image(image: Image) -> list[Finding]:
    """The platform's runtime image (the init container the mutating policy adds)."""
    findings = []
    command = [
        *(image.runtime_config.get("Entrypoint") or []),
        *(image.runtime_config.get("Cmd") or []),
    ]
    if command == list(contract.RUNTIME_INSTALL_COMMAND):
        findings.append(Finding("entrypoint", "ok", f"entrypoint {json.dumps(command)}"))
    else:
        findings.append(
            Finding(
                "entrypoint",
                "problem",
                f"entrypoint {json.dumps(command)}, not {json.dumps(list(contract.RUNTIME_INSTALL_COMMAND))}",
                "build it with `secureml image build-runtime`",
            )
        )
    missing = [
        name
        for name in PAYLOAD_FILES
        if (entry := image.files.get(f"{contract.RUNTIME_PAYLOAD_DIR}/{name}")) is None
        or entry.kind != "file"
    ]
    if missing:
        findings.append(
            Finding(
                "payload",
                "problem",
                f"the payload lacks {', '.join(missing)} under {contract.RUNTIME_PAYLOAD_DIR}",
                "build it with `secureml image build-runtime`",
            )
        )
    else:
        findings.append(Finding("payload", "ok", f"payload at {contract.RUNTIME_PAYLOAD_DIR}"))
    raw = image.files.read(f"{contract.RUNTIME_PAYLOAD_DIR}/manifest.json")
    manifest = json.loads(raw) if raw else {}
    version = str(manifest.get("secureml", "unknown"))
    if compatible(version):
        findings.append(
            Finding(
                "version",
                "ok",
                f"secureml {version}, Python {manifest.get('python')}, shim needs glibc >= "
                f"{manifest.get('shim_min_glibc')}",
            )
        )
    else:
        findings.append(
            Finding(
                "version",
                "problem",
                f"payload of secureml {version}; this secureml is {SECUREML_VERSION}",
                "rebuild it with this version's `secureml image build-runtime`",
            )
        )
    findings.append(_user(image))
    return findings


def check(reference: str, *, injected: bool | None = None) -> tuple[Image, list[Finding]]:
    """Read `reference` and check it as what its kind label says (a step image by default).

    `injected`: whether the launcher is injected (the profile names a runtime.image); None checks
    for the step image's own launcher as well, the stricter reading."""
    image = open_image(reference, wanted)
    if image.labels.get(KIND_LABEL) == RUNTIME_KIND:
        return image, check_runtime_image(image)
    return image, check_step_image(image, injected=bool(injected))


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "problem"]
