"""The launcher's identity stage against a real Workload API served over a unix socket.

The `spiffe` client, gRPC and the certificates are real; only the SPIRE agent is replaced by
`secureml.localrun.dev_identity.DevWorkloadAPI` (the API's own protobuf messages, a throwaway CA).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from secureml.core import contract
from secureml.enforcement.identity import (
    IdentityError,
    _check_chain,
    fetch_and_check_identity,
    socket_path_of,
)
from secureml.localrun.dev_identity import DevCA, DevWorkloadAPI
from tests.support.workload_api import SILENT, ExpiredSvidWorkloadAPI

EXPECTED = "spiffe://acme.example/ns/team-a/pipeline/fine-tune/step/train"


def _fetch(api: DevWorkloadAPI, out: Path, timeout_s: float = 5.0, expected: str = EXPECTED):
    return fetch_and_check_identity(expected, api.endpoint, out, timeout_s)


def test_right_id_is_accepted_and_written_privately(tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        result = _fetch(api, tmp_path / "svid")

    assert result.spiffe_id == EXPECTED
    assert stat.S_IMODE(os.stat(tmp_path / "svid").st_mode) == 0o700
    for path in (result.cert_path, result.key_path, result.bundle_path):
        assert path.parent == tmp_path / "svid"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert result.env == {
        contract.ENV_SVID_CERT: str(result.cert_path),
        contract.ENV_SVID_KEY: str(result.key_path),
        contract.ENV_SVID_BUNDLE: str(result.bundle_path),
    }

    leaf = x509.load_pem_x509_certificates(result.cert_path.read_bytes())[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [EXPECTED]
    key = serialization.load_pem_private_key(result.key_path.read_bytes(), password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()
    (authority,) = x509.load_pem_x509_certificates(result.bundle_path.read_bytes())
    leaf.verify_directly_issued_by(authority)
    assert authority.public_bytes(serialization.Encoding.PEM) == api.bundle_pem
    assert result.not_before < result.not_after
    assert result.to_record()["spiffe_id"] == EXPECTED
    assert "PRIVATE" not in str(result.to_record())


def test_existing_folder_and_files_are_made_private(tmp_path: Path) -> None:
    out = tmp_path / "svid"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    (out / "svid_key.pem").write_text("stale")
    os.chmod(out / "svid_key.pem", 0o644)
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        result = _fetch(api, out)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(result.key_path).st_mode) == 0o600
    assert b"BEGIN PRIVATE KEY" in result.key_path.read_bytes()


def test_wrong_id_is_refused_naming_both_ids_and_the_socket(tmp_path: Path) -> None:
    other = "spiffe://acme.example/ns/team-b/pipeline/fine-tune/step/train"
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=other) as api:
        with pytest.raises(IdentityError) as caught:
            _fetch(api, tmp_path / "svid")
    text = caught.value.diagnostics()
    assert other in text and EXPECTED in text and str(tmp_path / "agent.sock") in text
    assert caught.value.fix
    assert not (tmp_path / "svid").exists(), "nothing is written for a refused identity"


def test_id_must_match_exactly_not_by_prefix(tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED + "-evil") as api:
        with pytest.raises(IdentityError, match="must run as"):
            _fetch(api, tmp_path / "svid")


def test_expired_svid_is_refused(tmp_path: Path) -> None:
    with ExpiredSvidWorkloadAPI(tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        with pytest.raises(IdentityError) as caught:
            _fetch(api, tmp_path / "svid")
    assert "not valid now" in caught.value.what and EXPECTED in caught.value.what


def test_missing_socket_fails_fast_and_says_how_to_get_one(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(IdentityError) as caught:
        fetch_and_check_identity(EXPECTED, f"unix://{tmp_path}/none.sock", tmp_path / "o", 5.0)
    assert time.monotonic() - started < 1.0
    text = caught.value.diagnostics()
    assert f"{tmp_path}/none.sock" in text and EXPECTED in text and "--dev-identity" in text


def test_stale_socket_of_a_crashed_agent_says_the_agent_is_down(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as stale:  # bound, never listening: a killed agent's file
        stale.bind(str(path))
    started = time.monotonic()
    with pytest.raises(IdentityError) as caught:
        fetch_and_check_identity(EXPECTED, f"unix://{path}", tmp_path / "o", 5.0)
    assert time.monotonic() - started < 5.0
    assert "nothing answers on the Workload API socket" in caught.value.what
    assert "UNAVAILABLE" in caught.value.what and EXPECTED in caught.value.what
    assert "agent" in caught.value.fix and "registration entry" not in caught.value.fix


@pytest.mark.parametrize("mode", ["hang", "mute"])
def test_a_server_that_never_answers_is_abandoned_at_the_timeout(tmp_path: Path, mode: str) -> None:
    timeout_s = 0.6
    with SILENT[mode](tmp_path / "agent.sock", spiffe_id=EXPECTED) as api:
        started = time.monotonic()
        with pytest.raises(IdentityError) as caught:
            _fetch(api, tmp_path / "svid", timeout_s=timeout_s)
        elapsed = time.monotonic() - started
    assert timeout_s - 0.05 <= elapsed < timeout_s + 1.0, elapsed
    assert "did not answer within 0.6 s" in caught.value.what
    assert contract.ENV_IDENTITY_TIMEOUT in caught.value.fix


def test_workload_without_an_identity_is_refused(tmp_path: Path) -> None:
    with DevWorkloadAPI(
        tmp_path / "agent.sock", spiffe_id=lambda workload: None, trust_domain="acme.example"
    ) as api:
        with pytest.raises(IdentityError) as caught:
            _fetch(api, tmp_path / "svid")
    assert "PERMISSION_DENIED" in caught.value.what


def test_svid_not_signed_by_the_bundle_is_refused() -> None:
    issuer, stranger = DevCA("acme.example"), DevCA("acme.example")
    svid = issuer.issue(EXPECTED)
    chain = [x509.load_der_x509_certificate(svid.chain_der)]
    _check_chain(chain, [issuer.certificate], EXPECTED, "here")
    with pytest.raises(IdentityError, match="does not chain"):
        _check_chain(chain, [stranger.certificate], EXPECTED, "here")
    with pytest.raises(IdentityError, match="does not chain"):
        _check_chain(chain, [], EXPECTED, "here")


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("unix:///run/a.sock", "/run/a.sock"),
        ("unix:/run/a.sock", "/run/a.sock"),
        ("/run/a.sock", "/run/a.sock"),
    ],
)
def test_endpoint_forms(endpoint: str, path: str) -> None:
    assert socket_path_of(endpoint) == Path(path)


def test_tcp_endpoint_is_refused() -> None:
    with pytest.raises(IdentityError, match="not a unix socket"):
        socket_path_of("tcp://127.0.0.1:8081")
