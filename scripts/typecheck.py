"""Run mypy over the package under the import names it is installed with (`make lint`).

setup.py installs the folders `components/` and `enforcement/` as `secureml.components` and
`secureml.enforcement`. mypy finds modules only by walking folders, and the editable install maps
them with an import hook that mypy cannot follow (python/mypy#12313), so a plain `mypy secureml`
would not resolve `secureml.enforcement`. This script gives mypy every file with its module name,
taking the mapping from setup.py's `SUBTREES` (package_layout.py); the settings are `[tool.mypy]` in pyproject.toml.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from package_layout import ROOT, package_modules


def sources() -> list[BuildSource]:
    """Every Python file of the package, named as it is imported."""
    return [
        BuildSource(str(path.relative_to(ROOT)), module)
        for module, path in package_modules().items()
    ]


def main(argv: list[str]) -> int:
    # The config file (pyproject.toml's [tool.mypy]) and any flags come through mypy's own parser;
    # the file list is ours. `-c pass` only satisfies the parser's need for a target.
    _, options = process_options([*argv, "-c", "pass"])
    try:
        result = build.build(sources(), options)
    except CompileError as err:
        print("\n".join(err.messages), file=sys.stderr)
        return 2
    for line in result.errors:
        print(line)
    files = len({source.path for source in sources()})
    if result.errors:
        errors = sum(": error:" in line for line in result.errors)
        print(f"Found {errors} errors (checked {files} source files)")
        return 1
    print(f"Success: no issues found in {files} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
