"""The trusted root's validity windows at the signing time (secureml/supplychain/root_windows.py).

The tests' private Sigstore signs an hour ago (its certificate, SCT and integrated time all carry
that time); each window of its trusted root is then moved to end just before, or start just after,
the signing time. sigstore-python 4.5.1 accepts all of these (it compares windows with the current
time, and only their start); secureml must refuse each, and accept a window ending exactly then.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.verifier import SignatureError, SignatureVerifier
from tests.support.private_sigstore import PrivateSigstore

GH = "https://token.actions.githubusercontent.com"
SIGNER = "https://github.com/acme/ml/.github/workflows/build.yml@refs/heads/main"
WHO = [TrustedIdentity(issuer=GH, subject=SIGNER)]
SIGNED_AT = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
DIGEST = "5d" * 32


def _at(offset_s: int) -> str:
    return (SIGNED_AT + dt.timedelta(seconds=offset_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore(now=SIGNED_AT)


@pytest.fixture(scope="module")
def bundles(pki: PrivateSigstore) -> dict[str, bytes]:
    return {
        "message": pki.sign_blob(b"model weights", subject=SIGNER, issuer=GH),
        "dsse": pki.sign_image("ghcr.io/acme/train", DIGEST, subject=SIGNER, issuer=GH),
    }


def verify(
    pki: PrivateSigstore,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
    kind: str,
    bundles: dict[str, bytes],
) -> None:
    root = pki.trusted_root()
    edit(root)
    path = tmp_path / "trusted_root.json"
    path.write_text(json.dumps(root))
    verifier = SignatureVerifier(path)
    if kind == "message":
        verifier.verify_artifact(b"model weights", bundles[kind], WHO)
    else:
        verifier.verify_image(f"ghcr.io/acme/train@sha256:{DIGEST}", bundles[kind], WHO)


def ca(window: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    return lambda root: root["certificateAuthorities"][0].update(validFor=window)


def tlog(window: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    return lambda root: root["tlogs"][0]["publicKey"].update(validFor=window)


def ctlog(window: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    return lambda root: root["ctlogs"][0]["publicKey"].update(validFor=window)


REFUSED = {
    "CA ended before": (ca({"start": _at(-86400), "end": _at(-1)}), "no certificate authority"),
    "CA started after": (ca({"start": _at(1)}), "no certificate authority"),
    "log key ended before": (tlog({"start": _at(-86400), "end": _at(-1)}), "transparency log key"),
    "log key started after": (tlog({"start": _at(1)}), "transparency log key"),
    "CT key ended before": (ctlog({"start": _at(-86400), "end": _at(-1)}), "CT log key"),
    "CT key started after": (ctlog({"start": _at(1)}), "CT log key"),
}


@pytest.mark.parametrize("kind", ["message", "dsse"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_window_that_excludes_the_signing_time_is_refused(
    pki, bundles, tmp_path, name, kind
) -> None:
    edit, reason = REFUSED[name]
    with pytest.raises(SignatureError, match=reason) as err:
        verify(pki, tmp_path, edit, kind, bundles)
    assert err.value.kind == "invalid"


@pytest.mark.parametrize("kind", ["message", "dsse"])
def test_windows_that_end_exactly_at_the_signing_time_verify(pki, bundles, tmp_path, kind) -> None:
    def all_end_then(root: dict[str, Any]) -> None:
        for edit in (ca, tlog, ctlog):
            edit({"start": _at(0), "end": _at(0)})(root)

    verify(pki, tmp_path, all_end_then, kind, bundles)


def test_another_ca_valid_then_does_not_stand_in_for_the_issuer(pki, bundles, tmp_path) -> None:
    """A second CA, valid at the signing time, did not issue the certificate: the issuer's window counts."""
    other = PrivateSigstore(now=SIGNED_AT).trusted_root()["certificateAuthorities"][0]

    def expired_issuer_plus_other(root: dict[str, Any]) -> None:
        ca({"start": _at(-86400), "end": _at(-1)})(root)
        root["certificateAuthorities"].append(other)

    with pytest.raises(SignatureError, match="no certificate authority"):
        verify(pki, tmp_path, expired_issuer_plus_other, "message", bundles)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_shared_dsse_path_checks_the_windows(pki, bundles, tmp_path, name) -> None:
    """`verify_dsse`, which model signatures and compile attestations verify through too (they
    called sigstore-python's `verify_dsse` directly before, without the windows)."""
    from sigstore.models import Bundle

    from secureml.supplychain.identity import IdentityPolicy
    from secureml.supplychain.trust import verifier_for
    from secureml.supplychain.verifier import verify_dsse

    raw = bundles["dsse"]

    def check(root: dict[str, Any], where: Path) -> None:
        where.write_text(json.dumps(root))
        verify_dsse(
            verifier_for(where), json.loads(raw), Bundle.from_json(raw), IdentityPolicy(WHO)
        )

    check(pki.trusted_root(), tmp_path / "good.json")
    edit, reason = REFUSED[name]
    root = pki.trusted_root()
    edit(root)
    with pytest.raises(Exception, match=reason):
        check(root, tmp_path / "edited.json")
