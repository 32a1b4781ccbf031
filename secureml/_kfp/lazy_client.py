"""kfp imported with its API client loaded on first use, for commands that compile and never submit.

`import kfp` (kfp 2.17) imports `kfp.client` with the package: the API client and its generated
REST bindings (`kfp_server_api`, about 80 modules), which `secureml compile` never uses. They
were about 4 MiB of a 500-step compile's peak memory. kfp skips its "compile-time only
dependencies" (`kfp.components`, `kfp.dsl` and the client) where `_KFP_RUNTIME` is "true" while
the package is first imported (its step containers run so). `import_kfp()` imports the package
that way, then `kfp.components` and `kfp.dsl` as kfp's own `__init__` does, and gives
`kfp.Client` on first use (a module `__getattr__`, PEP 562): a pipeline file that names
`kfp.Client` still gets kfp's class. Where kfp is already imported, it does nothing.
`tests/cli/test_kfp_lazy_client.py` compiles with and without it, to the same YAML.
"""

from __future__ import annotations

import os
import sys
from typing import Any

_SWITCH = "_KFP_RUNTIME"  # read once, by kfp/__init__.py and kfp/dsl/__init__.py at their import


def import_kfp() -> None:
    """Import kfp, its `components` and `dsl`, with `kfp.Client` imported on first use."""
    if "kfp" in sys.modules:
        return
    previous = os.environ.get(_SWITCH)
    os.environ[_SWITCH] = "true"
    try:
        import kfp
    finally:
        if previous is None:
            del os.environ[_SWITCH]
        else:
            os.environ[_SWITCH] = previous
    from kfp import components, dsl  # noqa: F401 - as kfp's __init__ imports them

    kfp.__getattr__ = _client


def _client(name: str) -> Any:
    if name == "Client":
        from kfp.client import Client

        return Client
    raise AttributeError(f"module 'kfp' has no attribute {name!r}")
