"""Every module of the secureml package and its file, as scripts/package_layout.py maps them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.support.paths import REPO


def _layout():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "package_layout", REPO / "scripts/package_layout.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("package_layout", module)
    spec.loader.exec_module(module)
    return module


MODULES: dict[str, Path] = _layout().package_modules()
