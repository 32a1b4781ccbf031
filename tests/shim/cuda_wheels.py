"""NVIDIA's own headers and CUDA runtimes, per CUDA major version, for the drift and look-up tests.

They come from an installed toolkit (`/usr/local/cuda*`) or from the test extra's wheels:
`nvidia-cuda-runtime-cu12` / `nvidia-nvml-dev-cu12` (`nvidia/cuda_runtime`, `nvidia/nvml_dev`) and
`nvidia-cuda-runtime` / `nvidia-nvml-dev` 13.x (`nvidia/cu13`). Without the wheels a version is
simply absent here, and the tests say which wheel to install.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

MAJORS = (12, 13)
WHEEL = {
    12: "nvidia-cuda-runtime-cu12 / nvidia-nvml-dev-cu12",
    13: "nvidia-cuda-runtime / nvidia-nvml-dev 13.x",
}


def _wheel_roots() -> list[Path]:
    try:
        import nvidia
    except ImportError:
        return []
    return [Path(root) for root in nvidia.__path__]


def _folders(major: int) -> list[Path]:
    """Where a version's files may be: its wheels' folders, then toolkits of that version."""
    names = ("cuda_runtime", "nvml_dev") if major == 12 else (f"cu{major}",)
    folders = [root / name for root in _wheel_roots() for name in names]
    folders += [Path(p) for p in sorted(glob.glob(f"/usr/local/cuda-{major}*"), reverse=True)]
    return folders


def _version_of(cuda_h: Path) -> int:
    match = re.search(r"#define CUDA_VERSION (\d+)", cuda_h.read_text(errors="replace"))
    return int(match.group(1)) // 1000 if match else 0


def include_dir(header: str, major: int) -> Path | None:
    """The folder holding `header` (cuda.h or nvml.h) of CUDA `major`, or None."""
    for folder in _folders(major):
        path = folder / "include" / header
        if path.is_file() and (header != "cuda.h" or _version_of(path) == major):
            return path.parent
    return None


def runtime(major: int) -> Path | None:
    """libcudart.so.<major> of that version, or None."""
    for folder in _folders(major):
        for lib in ("lib", "lib64"):
            path = folder / lib / f"libcudart.so.{major}"
            if path.is_file():
                return path
    return None
