"""Package layout: `secureml/`, plus `components/` and `enforcement/` installed as subpackages.

The component library and the in-pod runtime live in top-level folders of their own
(docs/architecture.md, "The parts"); they are importable as `secureml.components` and
`secureml.enforcement`.
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup
from setuptools.command.build_py import build_py

SUBTREES = {"secureml.components": "components", "secureml.enforcement": "enforcement"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(include=["secureml", "secureml.*"])
    package_dir = {"secureml": "secureml"}
    for name, folder in SUBTREES.items():
        package_dir[name] = folder
        packages.append(name)
        # Namespace discovery also lists the C source folders (enforcement/shim, shim/fake), whose
        # files ship as package data.
        subpackages = find_namespace_packages(where=folder, exclude=["*__pycache__*", "shim.fuzz"])
        packages += [f"{name}.{sub}" for sub in subpackages]
    return packages, package_dir


class BuildPyWithShim(build_py):
    """Also compile the native quota shim (enforcement/shim/, docs/shim.md) into the package.

    Without a C compiler the install goes on with a warning: the SDK works, and only a step that
    needs the shim fails, saying how to build it. Editable installs put the library next to
    enforcement/shim_control.py, where `secureml.enforcement.shim_control.library_path()` looks.
    """

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        spec = importlib.util.spec_from_file_location(
            "_secureml_shim_build", root / "enforcement" / "shim_control.py"
        )
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
        editable = getattr(self, "editable_mode", False)
        output = (
            root / "enforcement" if editable else Path(self.build_lib) / "secureml" / "enforcement"
        )
        if shim.find_compiler() is None:
            print(
                "WARNING: no C compiler (cc/gcc/clang) found: the GPU quota shim libsecureml_shim.so was "
                "not built. The SDK works without it; time-sliced GPU steps that require the shim will "
                "fail until you install a compiler and reinstall.",
                file=sys.stderr,
            )
            return
        try:
            built = shim.build(output)
        except RuntimeError as exc:
            print(f"WARNING: the GPU quota shim was not built: {exc}", file=sys.stderr)
            return
        print(f"built {built}")


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir, cmdclass={"build_py": BuildPyWithShim})
