"""`spire`: one real spire-server and spire-agent for the session (tests/harness/spire.py).

Its trust domain is the example profiles' (`acme.example`), so the SPIFFE IDs the tests register are
the ones the compiler writes for a team-a step. Under pytest-xdist each worker that runs a test
using it starts its own SPIRE (under a second once the binaries are built). Its tests carry the
`spire` marker: `-m "not spire"` leaves them out. Where Go (and so the harness) is missing it skips
saying so, except under CI=true, where it fails: CI must test against the real SPIRE.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from harness.spire import Spire, SpireError, build_spire, running_spire


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spire: runs against the real SPIRE of the `spire` fixture (tests/harness)"
    )


@pytest.fixture(scope="session")
def spire() -> Iterator[Spire]:
    try:
        bin_dir = build_spire()
    except SpireError as error:
        reason = f"no test SPIRE: {error}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    with running_spire(bin_dir) as running:  # a start failure is a failure everywhere
        yield running
