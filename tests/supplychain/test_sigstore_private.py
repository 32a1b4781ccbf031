"""sigstore-python's private APIs are used in one module, sigstore_private.py, and only with the
sigstore releases it was tested with.

The scan reads every module of the package (secureml/, enforcement/, components/) and finds: an
import of a private sigstore module or name (`sigstore._internal...`, `from sigstore.dsse import
_verify`), an attribute access `x._name` where `_name` is a private name sigstore-python defines
(not on `self`/`cls`), `getattr(x, "_name")`, a string naming a private part of the sigstore
package (`"_store"`), and an assignment to an attribute of anything imported from sigstore.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sigstore

from secureml.supplychain import sigstore_private
from secureml.supplychain.sigstore_private import SigstoreVersionError, check_sigstore_version
from tests.support.package_modules import MODULES
from tests.support.paths import REPO
from tests.support.sigstore_fixtures import BEACON, CONFORMANCE, GITHUB_ISSUER

SIGSTORE_DIR = Path(sigstore.__file__).parent
PRIVATE_MODULE = "secureml.supplychain.sigstore_private"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sigstore_private_names() -> tuple[set[str], set[str]]:
    """(names sigstore-python defines as private: functions, classes, attributes; the private
    parts of its package: modules, subpackages, data folders)."""
    names: set[str] = set()
    parts = {
        part
        for path in SIGSTORE_DIR.rglob("*")
        if "__pycache__" not in path.parts
        for part in path.relative_to(SIGSTORE_DIR).with_suffix("").parts
        if _private(part)
    }
    for path in SIGSTORE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                candidate = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                candidate = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                candidate = node.id
            else:
                continue
            if _private(candidate):
                names.add(candidate)
    return names, parts


PRIVATE_NAMES, PRIVATE_PARTS = sigstore_private_names()


def _sigstore_module(name: str | None) -> bool:
    return name is not None and name.split(".")[0].startswith("sigstore")


def private_uses(source: str) -> list[str]:
    """Each use of a private sigstore name in `source`, as `line: what`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                f"{line}: import {alias.name}"
                for alias in node.names
                if _sigstore_module(alias.name) and any(map(_private, alias.name.split(".")))
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level and _sigstore_module(node.module):
            assert node.module is not None
            if any(map(_private, node.module.split("."))):
                found.append(f"{line}: from {node.module} import ...")
            found += [
                f"{line}: from {node.module} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_NAMES:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{line}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE_NAMES
        ):
            found.append(f"{line}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.Constant) and node.value in PRIVATE_PARTS:
            found.append(f"{line}: {node.value!r}")
    return found


def sigstore_attribute_assignments(source: str) -> list[str]:
    """Each assignment to an attribute of something imported from sigstore, as `line: target`."""
    tree = ast.parse(source)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {
                (alias.asname or alias.name).split(".")[0]
                for alias in node.names
                if _sigstore_module(alias.name)
            }
        elif isinstance(node, ast.ImportFrom) and not node.level and _sigstore_module(node.module):
            bound |= {alias.asname or alias.name for alias in node.names}

    def root(node: ast.expr) -> str | None:
        while isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and root(node.args[0]) in bound
        ):
            found.append(f"{node.lineno}: {node.func.id}({ast.unparse(node.args[0])}, ...)")
        found += [
            f"{node.lineno}: {ast.unparse(target)}"
            for target in targets
            if isinstance(target, ast.Attribute) and root(target) in bound
        ]
    return found


def test_private_sigstore_names_only_in_sigstore_private() -> None:
    outside = {
        module: uses
        for module, path in MODULES.items()
        if module != PRIVATE_MODULE and (uses := private_uses(path.read_text(encoding="utf-8")))
    }
    assert outside == {}, "private sigstore names outside sigstore_private.py"


def test_no_module_assigns_to_an_attribute_of_sigstore() -> None:
    assigned = {
        module: found
        for module, path in MODULES.items()
        if (found := sigstore_attribute_assignments(path.read_text(encoding="utf-8")))
    }
    assert assigned == {}


def test_the_docs_name_each_private_api_the_module_uses() -> None:
    """docs/sigstore-conformance.md ("Private APIs of sigstore-python") names every private name
    the scan finds in the module."""
    source = MODULES[PRIVATE_MODULE].read_text(encoding="utf-8")
    docs = (REPO / "docs" / "sigstore-conformance.md").read_text(encoding="utf-8")
    section = docs.split("## Private APIs of sigstore-python", 1)[1].split("\n## ", 1)[0]
    uses = private_uses(source)
    named = {
        "._verify_common_signing_cert": "`Verifier._verify_common_signing_cert`",
        "._establish_time": "`Verifier._establish_time`",
        "._verify": "`TransparencyLogEntry._verify`",
        "from sigstore._internal.trust import ...": "`sigstore._internal.trust.Keyring`",
        "'_store'": "`sigstore/_store/",
    }
    assert sorted({use.split(": ", 1)[1] for use in uses}) == sorted(named)
    for phrase in named.values():
        assert phrase in section


def test_the_scan_finds_each_kind_of_private_use() -> None:
    bad = """
import sigstore._internal.trust
from sigstore._internal.merkle import verify_merkle_inclusion
from sigstore.dsse import _verify
from sigstore import _utils
from sigstore.verify import Verifier

def f(verifier, bundle, root):
    verifier._verify_common_signing_cert(bundle, None)
    envelope = bundle._dsse_envelope
    inner = root._inner
    getattr(verifier, "_establish_time")(bundle)
    return resources.files("sigstore") / "_store"

class Mine:
    def _verify(self):
        return self._verify  # its own private member: fine
"""
    assert sorted(use.split(": ", 1)[1] for use in private_uses(bad)) == sorted(
        [
            "import sigstore._internal.trust",
            "from sigstore._internal.merkle import ...",
            "from sigstore.dsse import _verify",
            "from sigstore import _utils",
            "._verify_common_signing_cert",
            "._dsse_envelope",
            "._inner",
            "getattr(..., '_establish_time')",
            "'_store'",
        ]
    )


def test_the_scan_finds_assignments_to_sigstore() -> None:
    bad = """
import sigstore
from sigstore.verify import Verifier
from sigstore import dsse as d

sigstore.__version__ = "4.5.1"
Verifier.verify_dsse = lambda *a: None
d._pae.cache = {}
setattr(Verifier, "verify_artifact", None)
mine = object()
mine.verify = None  # not sigstore's: fine
"""
    assert sorted(use.split(": ", 1)[1] for use in sigstore_attribute_assignments(bad)) == sorted(
        ["sigstore.__version__", "Verifier.verify_dsse", "d._pae.cache", "setattr(Verifier, ...)"]
    )


@pytest.mark.parametrize("version", ["4.3.0", "4.4.0", "4.5.0", "4.5.1", "4.5.99"])
def test_a_tested_release_is_accepted(version: str) -> None:
    check_sigstore_version(version)


@pytest.mark.parametrize("version", ["4.1.0", "4.2.0", "4.6.0", "5.0.0", "3.6.7", "4.x", ""])
def test_another_release_is_refused(version: str) -> None:
    with pytest.raises(SigstoreVersionError) as err:
        check_sigstore_version(version)
    assert err.value.what == (
        f"sigstore {version} is installed; secureml is tested with sigstore >=4.3.0,<4.6.0"
    )
    assert "private" in err.value.why
    assert err.value.fix == "install a tested release: pip install 'sigstore>=4.3.0,<4.6.0'"
    assert err.value.exit_code == 2


def test_the_installed_release_is_tested() -> None:
    low, high = sigstore_private.TESTED
    assert sigstore.__version__.startswith("4.")
    check_sigstore_version(sigstore.__version__)
    requirement = next(
        line
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if line.strip().startswith('"sigstore>=')
    )
    assert f'"sigstore>={low[0]}.{low[1]},<{high[0]}.{high[1]}"' in requirement


@pytest.mark.parametrize(
    ("case", "who"),
    [
        (
            "happy-path-v0.3-new-mediaType",
            ["--certificate-identity", BEACON, "--certificate-oidc-issuer", GITHUB_ISSUER],
        ),
        ("managed-key-happy-path", ["--key", "key.pub"]),
    ],
)
def test_an_untested_release_is_refused_at_import(
    tmp_path: Path, case: str, who: list[str]
) -> None:
    """The real sigstore package under another version number: `verify-bundle`, by identity or
    with a key, exits 2 with the refusal before it verifies anything."""
    fake = tmp_path / "sigstore"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        f"__version__ = '4.6.0'\n__path__.append({str(SIGSTORE_DIR)!r})\n"
    )
    folder = CONFORMANCE / case
    who = [str(folder / arg) if arg == "key.pub" else arg for arg in who]
    search_path = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "secureml",
            "verify-bundle",
            "--bundle",
            str(folder / "bundle.sigstore.json"),
            *who,
            str(folder.parent / "a.txt"),
        ],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(search_path)},
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "sigstore 4.6.0 is installed; secureml is tested with sigstore >=4.3.0,<4.6.0" in output
    assert "pip install 'sigstore>=4.3.0,<4.6.0'" in output
    assert "Traceback" not in output
