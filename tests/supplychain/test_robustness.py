"""Generated inputs: image references and damaged bundles never cause anything but a clear error."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef, registry_allowed
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.paths import REPO
from tests.support.sigstore_fixtures import BEACON, CONFORMANCE, GITHUB_ISSUER

HAPPY = CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json"
REF_ALPHABET = st.sampled_from(
    list("abcxyz019-_.:/@ABC") + ["sha256:", "ghcr.io/", "localhost:5000/", "a" * 64]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(REF_ALPHABET, max_size=12).map("".join))
def test_parse_never_crashes_and_round_trips(text):
    try:
        ref = ImageRef.parse(text)
    except SecuremlError as err:
        assert err.what and err.fix
        return
    again = ImageRef.parse(str(ref))
    assert again == ref
    assert registry_allowed(ref, [ref.registry]) is True
    assert registry_allowed(ref, [ref.name]) is True


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_real_bundle_never_crashes(data):
    raw = bytearray(HAPPY.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    verifier = SignatureVerifier("production")
    artifact = (CONFORMANCE / "a.txt").read_bytes()
    who = [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]
    try:
        signed = verifier.verify_artifact(artifact, bytes(raw), who)
    except SignatureError as err:
        assert err.kind in ("invalid", "untrusted") and err.why
    else:  # a byte of an unsigned field (e.g. a key hint) may change without effect
        assert signed.signer == BEACON
        assert hashlib.sha256(artifact).hexdigest()


def test_cli_help_does_not_import_sigstore_or_oras():
    code = (
        "import sys; from secureml.cli import app; "
        "bad = [m for m in ('sigstore', 'oras', 'secureml.supplychain') if m in sys.modules]; "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"imported at CLI start: {result.stdout} {result.stderr}"
