"""The launcher's identity stage against a real SPIRE (spire-server and spire-agent v1.13).

The SVID comes from the real agent, issued by the real server's CA for a real registration entry
and attested by the real unix workload attestor; `tests/identity/test_identity_stage.py` keeps the
fast Workload API double (`secureml.localrun.dev_identity`) for everything else.

Which selector: the tests run as root and the launcher cannot run under another uid here (the
interpreter lives under /root, mode 0700), so `unix:uid:0` alone would also hand the identity to
the test runner and every other root process. Each test therefore runs the launcher as root in a
dedicated primary group of its own and registers `unix:uid:0` AND `unix:gid:<that group>`: only the
launched step matches, which the test of an unselected process shows. Distinct groups also keep one
test's entry from ever answering another's, though the session shares one agent.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from secureml.core import contract
from secureml.enforcement.audit import load_audit_records
from secureml.enforcement.launch import ExitCode
from secureml.profile.model import load_profile
from tests.harness.spire import Entry, Spire

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="the launcher runs in a group of its own: that needs root (CI is root)",
)
PROFILE = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "team-a.yaml")
EXPECTED = PROFILE.spiffe_id("fine-tune", "train")
OTHER = PROFILE.spiffe_id("fine-tune", "evaluate")
_GROUPS = itertools.count(48600)
WRITES_MARKER_AND_CERT = (
    "import os, sys; open(sys.argv[1], 'w').write(open(os.environ['SECUREML_SVID_CERT']).read())"
)


@dataclass
class Launched:
    returncode: int
    stderr: str
    record: dict[str, Any]

    def stage(self, name: str) -> dict[str, Any]:
        (entry,) = [s for s in self.record["stages"] if s["name"] == name]
        return dict(entry)


@pytest.fixture
def step_gid() -> int:
    """A primary group no other test and no other process on the machine uses."""
    return next(_GROUPS)


@pytest.fixture
def register(spire: Spire, step_gid: int) -> Iterator[Any]:
    """`register(spiffe_id)`: an entry for root processes of the step's group; deleted after."""
    entries: list[Entry] = []

    def create(spiffe_id: str) -> Entry:
        entry = spire.create_entry(spiffe_id, ["unix:uid:0", f"unix:gid:{step_gid}"])
        entries.append(entry)
        spire.wait_for_svid(spiffe_id, uid=0, gid=step_gid)
        return entry

    yield create
    for entry in entries:
        spire.delete_entry(entry)


def _launch(spire: Spire, tmp_path: Path, gid: int, marker: Path, **extra: str) -> Launched:
    env: Mapping[str, str] = {
        "PATH": "/usr/bin:/bin",
        contract.ENV_TENANT: PROFILE.metadata.name,
        contract.ENV_PIPELINE: "fine-tune",
        contract.ENV_STEP: "train",
        contract.ENV_IDENTITY_REQUIRED: "true",
        contract.ENV_EXPECTED_SPIFFE_ID: EXPECTED,
        contract.SPIFFE_SOCKET_ENV: spire.endpoint,
        contract.ENV_IDENTITY_TIMEOUT: "5",
        contract.ENV_IDENTITY_DIR: str(tmp_path / "ids"),
        contract.ENV_AUDIT_DIR: str(tmp_path / "audit"),
        **extra,
    }
    proc = subprocess.run(
        [
            *(sys.executable, "-m", contract.LAUNCHER_MODULE, "--"),
            *(sys.executable, "-c", WRITES_MARKER_AND_CERT, str(marker)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        group=gid,
        extra_groups=[],
    )
    (record,) = load_audit_records(tmp_path / "audit")
    return Launched(proc.returncode, proc.stderr, record)


def test_the_registered_id_runs_the_step_with_the_real_svid(
    spire: Spire, register: Any, step_gid: int, tmp_path: Path
) -> None:
    register(EXPECTED)
    marker = tmp_path / "ran"
    result = _launch(spire, tmp_path, step_gid, marker)

    assert result.returncode == 0, result.stderr
    assert result.record["spiffe_id"] == EXPECTED
    assert result.stage("identity")["status"] == "ok"
    # The step got the SVID the real agent issued: its SAN, signed by the server's CA.
    (leaf, *_) = x509.load_pem_x509_certificates(marker.read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [EXPECTED]
    authorities = x509.load_pem_x509_certificates(spire.bundle_path.read_bytes())
    assert any(_issued_by(leaf, authority) for authority in authorities)


def test_an_entry_for_another_id_stops_the_step_before_it_runs(
    spire: Spire, register: Any, step_gid: int, tmp_path: Path
) -> None:
    register(OTHER)
    marker = tmp_path / "ran"
    result = _launch(spire, tmp_path, step_gid, marker)

    assert result.returncode == ExitCode.IDENTITY == 71
    assert not marker.exists(), "the step ran under the wrong identity"
    identity = result.stage("identity")
    assert identity["status"] == "failed"
    assert (
        f"the Workload API issued {OTHER}, but this step must run as {EXPECTED}"
        in (identity["error"])
    )
    assert result.stage("run")["status"] == "skipped"
    assert result.record["exit_code"] == 71 and result.record["child_exit_code"] is None
    assert "spiffe_id" not in result.record


def test_a_process_the_entry_does_not_select_gets_no_identity(
    spire: Spire, register: Any, tmp_path: Path
) -> None:
    register(EXPECTED)
    marker = tmp_path / "ran"
    # The test runner's own group (0): root, but not the step's group; the agent issues nothing.
    result = _launch(spire, tmp_path, 0, marker)

    assert result.returncode == ExitCode.IDENTITY
    assert not marker.exists()
    error = result.stage("identity")["error"]
    assert "PERMISSION_DENIED" in error and "no identity issued" in error, error
    assert result.stage("run")["status"] == "skipped"


@pytest.mark.parametrize(
    ("crash", "why"),
    [
        (False, "no Workload API socket at"),  # shut down: the agent removed its socket
        (True, "nothing answers on the Workload API socket"),  # killed: a stale socket file stays
    ],
    ids=["stopped", "killed"],
)
def test_a_stopped_agent_stops_the_step_before_it_runs(
    spire: Spire, register: Any, step_gid: int, tmp_path: Path, crash: bool, why: str
) -> None:
    register(EXPECTED)
    marker = tmp_path / "ran"
    with spire.agent_stopped(crash=crash):
        assert spire.agent_socket.exists() == crash
        result = _launch(spire, tmp_path, step_gid, marker)

    assert result.returncode == ExitCode.IDENTITY
    assert not marker.exists()
    identity = result.stage("identity")
    assert identity["status"] == "failed"
    error = identity["error"]
    assert why in error and str(spire.agent_socket) in error and EXPECTED in error, error
    assert result.stage("run")["status"] == "skipped"
    assert result.record["exit_code"] == 71 and result.record["child_exit_code"] is None
    # The agent came back with its stored SVID and key: the same entry serves the step again.
    spire.wait_for_svid(EXPECTED, uid=0, gid=step_gid)


def _issued_by(leaf: x509.Certificate, authority: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(authority)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
