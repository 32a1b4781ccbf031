"""Bundle fetch against a real registry: CNCF distribution (`docker-registry`, Debian package
`docker-registry`, 2.8), started by the test on a free local port.

distribution 2.8 has no OCI referrers API (it answers 404), so this covers the `sha256-<hex>`
fallback-tag path end to end on a real registry; the referrers API itself is covered by the OCI
server in tests/support/oci_server.py.
"""

from __future__ import annotations

import hashlib

import pytest

from secureml.core.image_ref import ImageRef
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.registry import fetch_bundles
from secureml.supplychain.verifier import SignatureVerifier
from tests.support.docker_registry import attach_like_cosign
from tests.support.sigstore_fixtures import BEACON, CONFORMANCE, GITHUB_ISSUER


@pytest.fixture
def registry(docker_registry: str) -> str:
    return docker_registry


def test_fetch_through_fallback_tag_and_verify(registry):
    bundle = (CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json").read_bytes()
    subject = "sha256:" + hashlib.sha256((CONFORMANCE / "a.txt").read_bytes()).hexdigest()
    manifest = attach_like_cosign(registry, "acme/train", subject, bundle)
    ref = ImageRef.parse(f"{registry}/acme/train@{subject}")
    [found] = fetch_bundles(ref)
    assert found.content == bundle
    assert (
        found.source
        == f"{registry}/acme/train@{manifest} (fallback tag sha256-{subject.split(':')[1]})"
    )
    signed = SignatureVerifier("production").verify_image(
        ref, found.content, [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]
    )
    assert signed.signer == BEACON


def test_nothing_attached(registry):
    from secureml.supplychain.verifier import SignatureError

    with pytest.raises(SignatureError) as err:
        fetch_bundles(ImageRef.parse(f"{registry}/acme/none@sha256:{'e' * 64}"))
    assert err.value.kind == "missing" and "no Sigstore bundle is attached" in err.value.what
