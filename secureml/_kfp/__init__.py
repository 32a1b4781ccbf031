"""Everything that depends on kfp's internals; refused at import on a kfp release not tested.

Nothing else in secureml names a private kfp name (tests/test_no_patches.py).
"""

from __future__ import annotations

import kfp

from secureml.core.errors import SecuremlError

# The kfp releases whose internals this package was tested against (pyproject.toml pins the same).
TESTED_KFP = ("2.17.",)


def check_kfp_version(found: str) -> None:
    """Refuse a kfp release outside `TESTED_KFP`, saying what and how to fix it."""
    if not found.startswith(TESTED_KFP):
        raise SecuremlError(
            f"kfp {found} is installed; secureml is tested with kfp "
            + ", ".join(f"{prefix}x" for prefix in TESTED_KFP),
            why="secureml's compiler reads and works around kfp's compiler internals "
            "(secureml/_kfp/), which change between kfp releases without notice",
            fix="install the kfp release secureml pins (pip install 'kfp==2.17.3' "
            "'kfp-kubernetes==2.17.3'), or a secureml release tested with kfp " + found,
        )


def default_base_image() -> str:
    """The image kfp gives a Python component that names none (kfp 2.17: `python:3.11`)."""
    from kfp.dsl import component_factory

    image: str = component_factory._DEFAULT_BASE_IMAGE
    return image


check_kfp_version(kfp.__version__)
