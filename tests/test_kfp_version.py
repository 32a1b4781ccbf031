"""`secureml._kfp` refuses, at import, a kfp release its reads of kfp's internals were not tested
with: one `SecuremlError` saying what, why and how to fix it."""

from __future__ import annotations

import subprocess
import sys

import kfp
import pytest

from secureml._kfp import TESTED_KFP, check_kfp_version
from secureml.core.errors import SecuremlError


def test_the_installed_kfp_is_a_tested_one() -> None:
    check_kfp_version(kfp.__version__)
    assert kfp.__version__.startswith(TESTED_KFP)


@pytest.mark.parametrize("found", ["2.18.0", "2.16.1", "3.0.0", "2.1.7"])
def test_an_untested_kfp_is_refused_with_what_why_and_fix(found: str) -> None:
    with pytest.raises(SecuremlError) as refused:
        check_kfp_version(found)
    assert f"kfp {found} is installed" in refused.value.what
    assert "secureml/_kfp/" in refused.value.why
    assert "kfp==2.17.3" in refused.value.fix


def test_importing_it_under_an_untested_kfp_fails_before_anything_reads_kfp() -> None:
    source = (
        "import kfp; kfp.__version__ = '2.99.0'\n"  # this child process's own kfp, pretending
        "from secureml.core.errors import SecuremlError\n"
        "try:\n"
        "    import secureml._kfp.deferred\n"
        "except SecuremlError as err:\n"
        "    print(err.diagnostics())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.startswith("kfp 2.99.0 is installed; secureml is tested with kfp 2.17.x")
