"""`secureml verify-bundle` over every sigstore-conformance case, in file and in digest mode.

The 70 bundle-verify cases of sigstore-conformance @ a73de497: 47 in ../shared/fixtures, the other
23 vendored in `conformance_upstream/` (its MANIFEST). Cases ending in `_fail` must fail, all others
must verify. The managed-key (`--key`) cases must also give their outcome for the right reason,
checked by name in `EXPECTED_OUTPUT`. In-process (CliRunner): the 140 runs take about 7 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from tests.support.sigstore_fixtures import CONFORMANCE, protocol_args

MANAGED_KEY = (
    "sha256:4cb32c4837c6dda8cfb1681efb3fef5f94ffce5b979e6bdb9139302c857af139"  # the cases' key.pub
)
EXPECTED_OUTPUT = {
    "managed-key-happy-path": f"signed by key {MANAGED_KEY}; message signature; logged in https://rekor.sigstore.dev",
    "managed-key-and-trusted-root": f"signed by key {MANAGED_KEY}; message signature; logged in https://rekor.sigstage.dev",
    # its key.pub is corrupted in its last base64 characters: no key at all, so nothing can verify
    "managed-key-wrong-key_fail": "managed-key-wrong-key_fail/key.pub is not a PEM public key",
}
UPSTREAM = Path(__file__).parent / "conformance_upstream"
UPSTREAM_CASE_COUNT = 70  # test/assets/bundle-verify at the commit in conformance_upstream/MANIFEST


def _case_dirs() -> dict[str, Path]:
    found = {p.name: p for p in UPSTREAM.iterdir() if p.is_dir()}
    if CONFORMANCE.is_dir():
        found.update({p.name: p for p in CONFORMANCE.iterdir() if p.is_dir()})
    return dict(sorted(found.items()))


CASE_DIRS = _case_dirs()
CASES = list(CASE_DIRS)


def test_every_case_is_collected():
    vendored = {p.name for p in UPSTREAM.iterdir() if p.is_dir()}
    listed = (UPSTREAM / "MANIFEST").read_text().split("cases:", 1)[1].split()
    assert sorted(listed) == sorted(vendored)
    assert not vendored & {p.name for p in CONFORMANCE.iterdir()}  # vendored only what is missing
    assert len(CASES) == UPSTREAM_CASE_COUNT


@pytest.mark.parametrize("mode", ["file", "digest"])
@pytest.mark.parametrize("name", CASES)
def test_conformance_case(name, mode):
    case = CASE_DIRS[name]
    result = CliRunner().invoke(app, protocol_args(case, mode == "digest"))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert EXPECTED_OUTPUT.get(name, "") in result.output
    if name.endswith("_fail"):
        assert result.exit_code != 0, result.output
        assert "error:" in result.output and "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result.output
        assert result.output.startswith("verified: ")
