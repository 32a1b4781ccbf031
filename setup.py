"""Package layout: `secureml/`, plus `components/` and `enforcement/` installed as subpackages.

DESIGN.md keeps the component library and the in-pod runtime in top-level folders of their own;
they are importable as `secureml.components` and `secureml.enforcement`.
"""

from setuptools import find_packages, setup

SUBTREES = {"secureml.components": "components", "secureml.enforcement": "enforcement"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(include=["secureml", "secureml.*"])
    package_dir = {"secureml": "secureml"}
    for name, folder in SUBTREES.items():
        package_dir[name] = folder
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
