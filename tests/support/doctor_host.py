"""A node's host files as `secureml doctor node --root` reads them, and its JSON report read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Tue Mar  5 22:23:56 UTC 2024\n"


def host_root(tmp_path: Path, *, module: str | None = DRIVER, envvar: str | None = "false") -> Path:
    root = tmp_path / "host"
    if module is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(NVRM.format(v=module))
        (root / "sys/module/nvidia").mkdir(parents=True)
    toolkit = root / "etc/nvidia-container-runtime"
    toolkit.mkdir(parents=True)
    lines = ["disable-require = false\n"]
    if envvar is not None:
        lines.append(f"accept-nvidia-visible-devices-envvar-when-unprivileged = {envvar}\n")
    lines.append('\n[nvidia-container-runtime]\nmode = "auto"\n')
    (toolkit / "config.toml").write_text("".join(lines))
    return root


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}
