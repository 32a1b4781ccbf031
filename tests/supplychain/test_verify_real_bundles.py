"""sigstore-python's verifier, offline, over real public bundles: the successes and each reason to fail."""

from __future__ import annotations

import hashlib
import json

import pytest

from secureml.core.errors import SecuremlError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.sigstore_fixtures import ASSETS, BEACON, CONFORMANCE, GITHUB_ISSUER, GITHUB_OAUTH

HAPPY = CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json"
DSSE_SLSA = CONFORMANCE / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
A_TXT = CONFORMANCE / "a.txt"
A_HEX = hashlib.sha256(A_TXT.read_bytes()).hexdigest() if A_TXT.exists() else "0" * 64
BEACON_ID = [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]


@pytest.fixture(scope="module")
def production() -> SignatureVerifier:
    return SignatureVerifier("production")


@pytest.fixture(scope="module")
def staging() -> SignatureVerifier:
    return SignatureVerifier("staging")


@pytest.mark.parametrize(
    ("bundle", "artifact", "signer"),
    [
        ("bundle.txt.sigstore", "bundle.txt", "a@tny.town"),
        ("bundle_v3.txt.sigstore", "bundle_v3.txt", "william@yossarian.net"),
        ("bundle_v3_alt.txt.sigstore", "bundle_v3_alt.txt", "william@yossarian.net"),
        ("staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt", "jku@goto.fi"),
    ],
)
def test_staging_assets_verify_and_a_flipped_byte_fails(staging, bundle, artifact, signer):
    content = (ASSETS / artifact).read_bytes()
    raw_bundle = (ASSETS / bundle).read_bytes()
    who = [TrustedIdentity(issuer=GITHUB_OAUTH, subject=signer)]
    signed = staging.verify_artifact(content, raw_bundle, who)
    assert (signed.signer, signed.issuer, signed.kind) == (
        signer,
        GITHUB_OAUTH,
        "message-signature",
    )
    flipped = bytearray(content)
    flipped[len(flipped) // 2] ^= 0x01
    with pytest.raises(SignatureError) as err:
        staging.verify_artifact(bytes(flipped), raw_bundle, who)
    assert err.value.kind == "invalid"
    assert "wrong digest" in err.value.why or "bad signature" in err.value.why


def test_staging_dsse_asset_verifies_over_its_subject(staging):
    raw_bundle = (ASSETS / "a.dsse.staging-rekor-v2.txt.sigstore.json").read_bytes()
    signed = staging.verify_artifact(f"sha256:{A_HEX}", raw_bundle, BEACON_ID)
    assert (signed.kind, signed.predicate_type) == ("dsse", "https://slsa.dev/provenance/v1")


def test_staging_bundle_does_not_verify_against_production(production):
    raw_bundle = (ASSETS / "bundle_v3.txt.sigstore").read_bytes()
    who = [TrustedIdentity(issuer=GITHUB_OAUTH, subject="william@yossarian.net")]
    with pytest.raises(SignatureError) as err:
        production.verify_artifact((ASSETS / "bundle_v3.txt").read_bytes(), raw_bundle, who)
    assert err.value.kind == "invalid"


def test_file_and_digest_mode_agree(production):
    by_file = production.verify_artifact(A_TXT.read_bytes(), HAPPY.read_bytes(), BEACON_ID)
    by_digest = production.verify_artifact(f"sha256:{A_HEX}", HAPPY.read_bytes(), BEACON_ID)
    assert by_file == by_digest
    assert by_file.signer == BEACON


def test_signature_over_manifest_digest_verifies_an_image(production):
    # A message-signature bundle signs a sha256 digest; here the digest of a.txt stands in for a
    # manifest digest, so the image below is "signed" by a real public-good signature.
    image = ImageRef.parse(f"ghcr.io/acme/train@sha256:{A_HEX}")
    signed = production.verify_image(image, HAPPY.read_bytes(), BEACON_ID)
    assert (signed.signer, signed.issuer, signed.kind) == (
        BEACON,
        GITHUB_ISSUER,
        "message-signature",
    )


def test_wrong_image_digest_fails_with_both_digests(production):
    other = "b" * 64
    with pytest.raises(SignatureError) as err:
        production.verify_image(f"ghcr.io/acme/train@sha256:{other}", HAPPY.read_bytes(), BEACON_ID)
    assert err.value.kind == "invalid" and err.value.rule() == "image.signature-invalid"
    assert f"the bundle signs sha256:{A_HEX}, not sha256:{other}" in err.value.why


@pytest.mark.parametrize(
    ("identity", "said"),
    [
        (
            TrustedIdentity(
                issuer=GITHUB_ISSUER,
                subject="https://github.com/acme/x/.github/workflows/a.yml@refs/heads/main",
            ),
            "matches none",
        ),
        (TrustedIdentity(issuer="https://accounts.google.com", subject=BEACON), "matches none"),
        (
            TrustedIdentity(issuer=GITHUB_ISSUER, subject_regexp=r"^https://github\.com/acme/"),
            "matches none",
        ),
    ],
)
def test_wrong_identity_fails_naming_the_actual_signer(production, identity, said):
    with pytest.raises(SignatureError) as err:
        production.verify_image(
            f"ghcr.io/acme/train@sha256:{A_HEX}", HAPPY.read_bytes(), [identity]
        )
    assert err.value.rule() == "image.signer-untrusted"
    assert said in err.value.why and BEACON in err.value.why and GITHUB_ISSUER in err.value.why


def test_regexp_identity_and_any_of_several(production):
    wrong = TrustedIdentity(issuer=GITHUB_ISSUER, subject="https://example.com/nobody")
    by_pattern = TrustedIdentity(
        issuer=GITHUB_ISSUER, subject_regexp=r"^https://github\.com/sigstore-conformance/"
    )
    signed = production.verify_artifact(A_TXT.read_bytes(), HAPPY.read_bytes(), [wrong, by_pattern])
    assert signed.trusted_identity == str(by_pattern)


def test_dsse_statement_with_other_predicate_is_not_an_image_signature(production):
    with pytest.raises(SignatureError) as err:
        production.verify_image(
            f"ghcr.io/acme/train@sha256:{A_HEX}", DSSE_SLSA.read_bytes(), BEACON_ID
        )
    assert err.value.kind == "invalid"
    assert "wrong predicate type 'https://slsa.dev/provenance/v1'" in err.value.why
    assert "https://sigstore.dev/cosign/sign/v1" in err.value.why


def test_dsse_statement_not_naming_the_digest_fails(production):
    with pytest.raises(SignatureError) as err:
        production.verify_artifact("sha256:" + "c" * 64, DSSE_SLSA.read_bytes(), BEACON_ID)
    assert f"the statement's subjects are sha256:{A_HEX}, not sha256:{'c' * 64}" in err.value.why


def test_flipped_signature_byte_in_bundle_fails(production):
    document = json.loads(HAPPY.read_bytes())
    signature = bytearray(document["messageSignature"]["signature"].encode())
    signature[10] = ord("A") if signature[10] != ord("A") else ord("B")
    document["messageSignature"]["signature"] = signature.decode()
    with pytest.raises(SignatureError) as err:
        production.verify_artifact(A_TXT.read_bytes(), json.dumps(document).encode(), BEACON_ID)
    assert err.value.kind == "invalid"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{not json", "is not JSON"),
        (b"[]", "is not a Sigstore bundle"),
        (b"{}", "is not a valid Sigstore bundle"),
    ],
)
def test_unusable_bundles_say_so(production, content, said):
    with pytest.raises(SignatureError) as err:
        production.verify_artifact(A_TXT.read_bytes(), content, BEACON_ID)
    assert said in err.value.what


def test_no_identities_is_refused(production):
    with pytest.raises(SignatureError) as err:
        production.verify_artifact(A_TXT.read_bytes(), HAPPY.read_bytes(), [])
    assert err.value.kind == "untrusted"


def test_tag_only_image_cannot_be_verified(production):
    with pytest.raises(SignatureError) as err:
        production.verify_image("ghcr.io/acme/train:v1", HAPPY.read_bytes(), BEACON_ID)
    assert err.value.rule() == "image.signature-missing"


def test_unknown_trusted_root_file_is_a_clear_error(tmp_path):
    with pytest.raises(SecuremlError) as err:
        SignatureVerifier(tmp_path / "nope.json")
    assert "does not exist" in err.value.what
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SecuremlError) as err:
        SignatureVerifier(tmp_path / "bad.json")
    assert "cannot be loaded" in err.value.what


def test_identity_needs_issuer_and_one_subject():
    with pytest.raises(SecuremlError):
        TrustedIdentity(issuer="", subject="x")
    with pytest.raises(SecuremlError):
        TrustedIdentity(issuer=GITHUB_ISSUER)
    with pytest.raises(SecuremlError):
        TrustedIdentity(issuer=GITHUB_ISSUER, subject="x", subject_regexp="y")
    with pytest.raises(SecuremlError) as err:
        TrustedIdentity(issuer=GITHUB_ISSUER, subject_regexp="(")
    assert "invalid" in err.value.what
