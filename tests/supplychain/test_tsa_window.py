"""A timestamp authority's validity window is closed at its end (trust.closed_tsa_windows).

The real bundle is sigstore-conformance's `trust-root-tsa-validity-end-inclusive` (vendored in
conformance_upstream/): a Rekor v2 entry whose only verified time is an RFC 3161 timestamp with
genTime 2025-06-12T12:02:20Z, exactly the end of its TSA's window. One microsecond earlier must fail.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.trust import closed_tsa_windows, load_trusted_root
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.sigstore_fixtures import BEACON, GITHUB_ISSUER

CASE = Path(__file__).parent / "conformance_upstream" / "trust-root-tsa-validity-end-inclusive"
ARTIFACT = (Path(__file__).parent / "conformance_upstream" / "a.txt").read_bytes()
BUNDLE = (CASE / "bundle.sigstore.json").read_bytes()
ROOT: dict[str, Any] = json.loads((CASE / "trusted_root.json").read_text())
TRUSTED = [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]


def root_file(tmp_path: Path, end: str | None) -> Path:
    root = json.loads(json.dumps(ROOT))
    if end is None:
        root["timestampAuthorities"][0]["validFor"].pop("end")
    else:
        root["timestampAuthorities"][0]["validFor"]["end"] = end
    path = tmp_path / f"root-{end}.json"
    path.write_text(json.dumps(root))
    return path


def verify(root: Path, bundle: bytes = BUNDLE, who=TRUSTED):
    return SignatureVerifier(root).verify_artifact(ARTIFACT, bundle, who)


def test_end_equal_to_the_timestamp_verifies(tmp_path: Path) -> None:
    assert ROOT["timestampAuthorities"][0]["validFor"]["end"] == "2025-06-12T12:02:20Z"
    assert verify(root_file(tmp_path, "2025-06-12T12:02:20Z")).signer == BEACON
    assert verify(root_file(tmp_path, None)).signer == BEACON


@pytest.mark.parametrize("end", ["2025-06-12T12:02:19.999999Z", "2025-06-12T12:02:19Z"])
def test_end_before_the_timestamp_fails(tmp_path: Path, end: str) -> None:
    with pytest.raises(SignatureError, match="not enough sources of verified time"):
        verify(root_file(tmp_path, end))


def test_start_after_the_timestamp_fails(tmp_path: Path) -> None:
    root = json.loads(json.dumps(ROOT))
    root["timestampAuthorities"][0]["validFor"] = {"start": "2025-06-12T12:02:20.000001Z"}
    path = tmp_path / "late-start.json"
    path.write_text(json.dumps(root))
    with pytest.raises(SignatureError, match="not enough sources of verified time"):
        verify(path)


def test_a_flipped_signature_or_wrong_identity_still_fails() -> None:
    document = json.loads(BUNDLE)
    signature = bytearray(base64.b64decode(document["messageSignature"]["signature"]))
    signature[12] ^= 1
    document["messageSignature"]["signature"] = base64.b64encode(bytes(signature)).decode()
    with pytest.raises(SignatureError) as err:
        verify(CASE / "trusted_root.json", json.dumps(document).encode())
    assert err.value.kind == "invalid"
    other = [TrustedIdentity(issuer=GITHUB_ISSUER, subject="https://github.com/evil/x")]
    with pytest.raises(SignatureError) as err:
        verify(CASE / "trusted_root.json", who=other)
    assert err.value.kind == "untrusted"


def test_only_the_tsa_end_moves_and_by_one_microsecond() -> None:
    from sigstore_models.trustroot.v1 import TrustedRoot as TrustedRootDocument

    data = (CASE / "trusted_root.json").read_bytes()
    raw = TrustedRootDocument.from_json(data)
    again = closed_tsa_windows(data)
    (tsa,) = again.document.timestamp_authorities
    (original,) = raw.timestamp_authorities
    assert original.valid_for is not None and original.valid_for.end is not None
    assert tsa.valid_for is not None and tsa.valid_for.end is not None
    assert (tsa.valid_for.end - original.valid_for.end).total_seconds() == pytest.approx(1e-6)
    assert tsa.valid_for.start == original.valid_for.start
    assert again.document.tlogs == raw.tlogs
    assert again.document.certificate_authorities == raw.certificate_authorities
    assert load_trusted_root(CASE / "trusted_root.json").document == again.document
    # sigstore-python's TrustedRoot, which its Verifier reads, holds the same closed window
    (authority,) = again.trusted_root.get_timestamp_authorities()
    assert authority.validity_period_end == tsa.valid_for.end
