"""`verify_images_for_compile`: per-step signer or violation, from --bundles files or the registry."""

from __future__ import annotations

import copy
import hashlib
import time
from pathlib import Path

import pytest
import yaml

from secureml.core.errors import NetworkError
from secureml.profile.model import TenantProfile
from secureml.supplychain.compile import verify_images_for_compile
from secureml.supplychain.image_bundles import bundle_filename
from tests.support.oci_server import OciServer
from tests.support.paths import REPO
from tests.support.sigstore_fixtures import BEACON, CONFORMANCE, GITHUB_ISSUER

HAPPY = CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json"
DSSE_SLSA = CONFORMANCE / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
# The happy-path bundle is a real signature over this digest (of a.txt): it stands in for a manifest.
SIGNED_HEX = (
    hashlib.sha256((CONFORMANCE / "a.txt").read_bytes()).hexdigest()
    if CONFORMANCE.is_dir()
    else "0" * 64
)
UNSIGNED_HEX = "d" * 64


def make_profile(identities: list[dict]) -> TenantProfile:
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data = copy.deepcopy(data)
    data["spec"]["images"]["signatures"] = {
        "required": True,
        "trustedRoot": "production",
        "identities": identities,
    }
    return TenantProfile.from_dict(data, source="test-profile")


TRUSTING = [
    {"issuer": GITHUB_ISSUER, "subjectRegExp": r"^https://github\.com/sigstore-conformance/"}
]
OTHERS = [{"issuer": GITHUB_ISSUER, "subjectRegExp": r"^https://github\.com/acme/"}]


@pytest.fixture
def bundles(tmp_path: Path) -> Path:
    (tmp_path / bundle_filename(SIGNED_HEX)).write_bytes(HAPPY.read_bytes())
    return tmp_path


def test_each_step_gets_signer_or_rule(bundles):
    steps = [
        ("prep", f"ghcr.io/acme/prep@sha256:{SIGNED_HEX}"),
        ("train", f"ghcr.io/acme/train@sha256:{UNSIGNED_HEX}"),
        ("eval", f"ghcr.io/acme/eval:v1@sha256:{SIGNED_HEX}"),
        ("tagged", "ghcr.io/acme/eval:v1"),
    ]
    results = verify_images_for_compile(steps, make_profile(TRUSTING), bundles, fetch=False)
    assert [r.step for r in results] == ["prep", "train", "eval", "tagged"]
    prep, train, evaluate, tagged = results
    assert (prep.verified, prep.signer, prep.issuer, prep.kind) == (
        True,
        BEACON,
        GITHUB_ISSUER,
        "message-signature",
    )
    assert prep.bundle == str(bundles / bundle_filename(SIGNED_HEX))
    assert (train.verified, train.rule) == (False, "image.signature-missing")
    assert bundle_filename(UNSIGNED_HEX) in train.message and "--fetch-bundles" in train.fix
    assert evaluate.verified and evaluate.image == f"ghcr.io/acme/eval:v1@sha256:{SIGNED_HEX}"
    assert (tagged.verified, tagged.rule) == (False, "image.signature-missing")
    assert "not pinned by digest" in tagged.message


def test_untrusted_signer_is_a_violation(bundles):
    [result] = verify_images_for_compile(
        [("train", f"ghcr.io/acme/train@sha256:{SIGNED_HEX}")], make_profile(OTHERS), bundles
    )
    assert (result.verified, result.rule) == (False, "image.signer-untrusted")
    assert BEACON in result.message


def test_invalid_bundle_is_a_violation(tmp_path):
    (tmp_path / bundle_filename(SIGNED_HEX)).write_bytes(DSSE_SLSA.read_bytes())
    [result] = verify_images_for_compile(
        [("train", f"ghcr.io/acme/train@sha256:{SIGNED_HEX}")], make_profile(TRUSTING), tmp_path
    )
    assert (result.verified, result.rule) == (False, "image.signature-invalid")
    assert "wrong predicate type" in result.message
    assert (
        result.to_dict()["rule"] == "image.signature-invalid" and "signer" not in result.to_dict()
    )


def test_no_bundles_dir_and_no_fetch():
    [result] = verify_images_for_compile(
        [("s", f"ghcr.io/acme/x@sha256:{SIGNED_HEX}")], make_profile(TRUSTING), None
    )
    assert result.rule == "image.signature-missing" and "fetching is off" in result.message


@pytest.mark.parametrize("referrers_api", [True, False], ids=["referrers-api", "tag-fallback"])
def test_fetch_from_registry(referrers_api):
    with OciServer(referrers_api=referrers_api) as registry:
        # An unrelated referrer (an SBOM) is listed too and must be ignored.
        registry.attach_bundle(
            "acme/train",
            f"sha256:{SIGNED_HEX}",
            b'{"spdxVersion": "SPDX-2.3"}',
            artifact_type="application/spdx+json",
        )
        manifest = registry.attach_bundle("acme/train", f"sha256:{SIGNED_HEX}", HAPPY.read_bytes())
        steps = [
            ("train", f"{registry.host}/acme/train@sha256:{SIGNED_HEX}"),
            ("other", f"{registry.host}/acme/other@sha256:{UNSIGNED_HEX}"),
        ]
        train, other = verify_images_for_compile(steps, make_profile(TRUSTING), None, fetch=True)
    assert train.verified and train.signer == BEACON
    how = "referrers API" if referrers_api else f"fallback tag sha256-{SIGNED_HEX}"
    assert train.bundle == f"{registry.host}/acme/train@{manifest} ({how})"
    assert (other.verified, other.rule) == (False, "image.signature-missing")
    assert "no Sigstore bundle is attached" in other.message
    assert any(
        path.startswith("/token") for path in registry.requests
    )  # the 401 challenge was answered
    fallback_used = any("/manifests/sha256-" in path for path in registry.requests)
    assert fallback_used is (not referrers_api)


def test_fetch_prefers_local_file(bundles):
    with OciServer() as registry:
        steps = [("train", f"{registry.host}/acme/train@sha256:{SIGNED_HEX}")]
        [result] = verify_images_for_compile(steps, make_profile(TRUSTING), bundles, fetch=True)
        assert result.verified and result.bundle.endswith(bundle_filename(SIGNED_HEX))
        assert registry.requests == []


def test_tampered_blob_from_registry_is_refused():
    with OciServer() as registry:
        registry.attach_bundle("acme/train", f"sha256:{SIGNED_HEX}", HAPPY.read_bytes())
        good = hashlib.sha256(HAPPY.read_bytes()).hexdigest()
        registry.blobs[f"sha256:{good}"] = HAPPY.read_bytes() + b" "
        [result] = verify_images_for_compile(
            [("train", f"{registry.host}/acme/train@sha256:{SIGNED_HEX}")],
            make_profile(TRUSTING),
            None,
            fetch=True,
        )
    assert (
        result.rule == "image.signature-missing" and "does not match its digest" in result.message
    )


def test_unreachable_registry_fails_fast():
    """A registry that does not answer is one environment error (exit 2), not a missing
    signature reported against every step."""
    start = time.monotonic()
    with pytest.raises(NetworkError, match="cannot fetch Sigstore bundles") as caught:
        verify_images_for_compile(
            [("train", f"127.0.0.1:1/acme/train@sha256:{SIGNED_HEX}")],
            make_profile(TRUSTING),
            None,
            fetch=True,
        )
    assert caught.value.exit_code == 2 and "did not answer" in caught.value.why
    assert time.monotonic() - start < 10
