"""Refreshing the trusted root through TUF (`--online`, `--tuf-url`), against a local repository.

The repository (tufrepo.py) is built with python-tuf's metadata API and served over HTTP on
127.0.0.1 by a thread; the client is secureml's (tuf_refresh.py, python-tuf's ngclient). Each
attack must be refused with exit 2, and the root fetched before must stay as it was and not be used.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from securesystemslib.signer import CryptoSigner
from typer.testing import CliRunner

from secureml.cli import app
from secureml.core.errors import InputError, NetworkError
from secureml.supplychain import trust, tuf_refresh
from secureml.supplychain.tuf_refresh import (
    TufRefusedError,
    TufRepository,
    cache_dir,
    refresh_trusted_root,
)
from tests.support.private_sigstore import PrivateSigstore

from .tufrepo import TufRepo, serve

GH = "https://token.actions.githubusercontent.com"
BUILDER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
DIGEST = "3c" * 32
IMAGE = f"ghcr.io/acme/train@sha256:{DIGEST}"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    trust._cached_verifier.cache_clear()  # an --online verifier is cached per process
    yield
    trust._cached_verifier.cache_clear()


@pytest.fixture
def repo(tmp_path: Path) -> TufRepo:
    return TufRepo(tmp_path / "repo")


@pytest.fixture
def url(repo: TufRepo) -> Iterator[str]:
    with serve(repo.directory) as base:
        yield base


def client(repo: TufRepo, url: str) -> TufRepository:
    return TufRepository(url, repo.root_bytes(), "the test root.json")


def test_the_published_root_is_fetched_and_updates_are_followed(repo: TufRepo, url: str) -> None:
    repo.publish(b'{"root": "A"}')
    path = refresh_trusted_root(client(repo, url))
    assert path.read_bytes() == b'{"root": "A"}'
    assert path.is_relative_to(cache_dir(url))
    repo.publish(b'{"root": "B"}')
    assert refresh_trusted_root(client(repo, url)).read_bytes() == b'{"root": "B"}'


def _refused(repo: TufRepo, url: str, reason: str, kept: bytes) -> None:
    cached = cache_dir(url) / "targets" / "trusted_root.json"
    with pytest.raises(TufRefusedError) as err:
        refresh_trusted_root(client(repo, url))
    assert reason in err.value.why and "not used instead" in err.value.why
    assert err.value.exit_code == 2
    assert cached.read_bytes() == kept  # the cache keeps the last good root, untouched


def test_an_older_timestamp_after_a_newer_one_is_refused(repo: TufRepo, url: str) -> None:
    repo.publish(b'{"root": "old"}')
    older = repo.files()
    repo.publish(b'{"root": "new"}')
    refresh_trusted_root(client(repo, url))
    repo.restore(older)  # the repository (or a mirror) serves version N-1 of everything again
    _refused(
        repo, url, "(a rollback) (BadVersionNumberError: New timestamp version", b'{"root": "new"}'
    )


def test_a_newer_timestamp_naming_an_older_snapshot_is_refused(repo: TufRepo, url: str) -> None:
    repo.publish(b'{"root": "old"}')
    repo.publish(b'{"root": "new"}')
    refresh_trusted_root(client(repo, url))
    timestamp = repo.timestamp.signed
    repo.write_timestamp(version=timestamp.version + 1, snapshot_version=timestamp.version - 1)
    _refused(repo, url, "New snapshot version must be >=", b'{"root": "new"}')


def test_an_expired_timestamp_is_refused(repo: TufRepo, url: str) -> None:
    past = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=1)
    repo.publish(b'{"root": "A"}')
    refresh_trusted_root(client(repo, url))
    repo.publish(b'{"root": "B"}', timestamp_expires=past)  # a frozen repository
    _refused(repo, url, "expired metadata", b'{"root": "A"}')


def test_an_expired_timestamp_on_first_contact_is_refused(repo: TufRepo, url: str) -> None:
    past = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=1)
    repo.publish(b'{"root": "A"}', timestamp_expires=past)
    with pytest.raises(TufRefusedError, match="refused the update") as err:
        refresh_trusted_root(client(repo, url))
    assert "ExpiredMetadataError" in err.value.why
    assert not (cache_dir(url) / "targets" / "trusted_root.json").exists()


def test_a_timestamp_signed_by_another_key_is_refused(repo: TufRepo, url: str) -> None:
    repo.publish(b'{"root": "A"}')
    refresh_trusted_root(client(repo, url))
    repo.write_timestamp(
        version=repo.timestamp.signed.version + 1,
        snapshot_version=repo.snapshot.signed.version,
        signer=CryptoSigner.generate_ed25519(),
    )
    _refused(repo, url, "not signed by the keys the root names", b'{"root": "A"}')


def test_a_rotated_key_is_followed_and_the_retired_key_refused(repo: TufRepo, url: str) -> None:
    repo.publish(b'{"root": "A"}')
    refresh_trusted_root(client(repo, url))
    retired = repo.rotate("timestamp")  # 2.root.json: a new timestamp key
    repo.publish(b'{"root": "B"}')
    assert refresh_trusted_root(client(repo, url)).read_bytes() == b'{"root": "B"}'
    repo.write_timestamp(
        version=repo.timestamp.signed.version + 1,
        snapshot_version=repo.snapshot.signed.version,
        signer=retired,
    )
    _refused(repo, url, "not signed by the keys the root names", b'{"root": "B"}')


@pytest.mark.parametrize("served", [b'{"root": "B"}', b'{"root": "evil"}'])  # same length, longer
def test_a_target_other_than_the_one_recorded_is_refused(
    repo: TufRepo, url: str, served: bytes
) -> None:
    repo.publish(b'{"root": "A"}')
    (repo.directory / "targets" / "trusted_root.json").write_bytes(served)
    with pytest.raises(TufRefusedError) as err:
        refresh_trusted_root(client(repo, url))
    assert "does not match the length or hash" in err.value.why


def test_a_repository_that_does_not_answer_is_a_network_error(repo: TufRepo) -> None:
    with serve(repo.directory) as gone:
        pass  # the port is closed again
    with pytest.raises(NetworkError, match="did not answer") as err:
        refresh_trusted_root(client(repo, gone))
    assert err.value.exit_code == 2


def test_a_bootstrap_root_that_is_not_tuf_metadata_is_unusable_input(url: str) -> None:
    with pytest.raises(InputError, match="cannot start a TUF client"):
        refresh_trusted_root(TufRepository(url, b'{"signed": {}}', "root.json"))


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def signed(tmp_path: Path, repo: TufRepo) -> tuple[Path, Path]:
    """An image bundle by the test Sigstore, whose trusted root the repository publishes."""
    pki = PrivateSigstore()
    repo.publish(json.dumps(pki.trusted_root()).encode())
    bundle = tmp_path / "image.sigstore.json"
    bundle.write_bytes(pki.sign_image("ghcr.io/acme/train", DIGEST, subject=BUILDER, issuer=GH))
    bootstrap = tmp_path / "root.json"
    bootstrap.write_bytes(repo.root_bytes())
    return bundle, bootstrap


def verify_image(bundle: Path, *extra: str) -> tuple[int, str]:
    args = ["verify-image", IMAGE, "--bundle", str(bundle)]
    args += ["--certificate-identity", BUILDER, "--certificate-oidc-issuer", GH, *extra]
    result = CliRunner().invoke(app, args)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_verify_image_takes_its_root_from_tuf_url_and_refuses_a_rollback(
    repo: TufRepo, url: str, signed: tuple[Path, Path]
) -> None:
    bundle, bootstrap = signed
    before = repo.files()
    repo.publish((repo.directory / "targets" / "trusted_root.json").read_bytes())
    code, output = verify_image(bundle, "--tuf-url", url, "--tuf-root", str(bootstrap))
    assert code == 0 and output.startswith(f"verified: {IMAGE} signed by {BUILDER}"), output
    repo.restore(before)
    trust._cached_verifier.cache_clear()
    code, output = verify_image(bundle, "--tuf-url", url, "--tuf-root", str(bootstrap))
    assert code == 2, output
    assert f"refused the update from TUF repository {url}" in output
    assert "(a rollback)" in output and "verified" not in output


def test_online_refreshes_the_public_root_through_tuf(
    repo: TufRepo, url: str, signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--online` goes through the same client: here the "production" repository is the local one."""
    bundle, _ = signed
    local = client(repo, url)
    monkeypatch.setattr(TufRepository, "public", classmethod(lambda cls, instance: local))
    code, output = verify_image(bundle)  # offline: the shipped production root, not the test one
    assert code == 1 and "Sigstore verification failed" in output, output
    code, output = verify_image(bundle, "--online")
    assert code == 0, output
    trust._cached_verifier.cache_clear()
    repo.publish(b"{}", timestamp_expires=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    code, output = verify_image(bundle, "--online")
    assert code == 2 and "expired metadata" in output, output


def test_online_without_a_reachable_repository_fails_closed(
    tmp_path: Path, signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real production bootstrap root.json, pointed at a port where nothing listens."""
    bundle, _ = signed
    monkeypatch.setitem(tuf_refresh.PUBLIC_TUF_URLS, "production", "http://127.0.0.1:9")
    code, output = verify_image(bundle, "--online")
    assert code == 2 and "the TUF repository http://127.0.0.1:9 did not answer" in output, output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # a file root has no TUF repository here: not silently used unrefreshed
        (["--online", "--trusted-root", "trusted_root.json"], "--online cannot refresh"),
        (["--tuf-root", "root.json"], "--tuf-root given without --tuf-url"),
        (["--tuf-url", "http://127.0.0.1:9", "--trusted-root", "staging"], "both given"),
        (["--tuf-url", "http://127.0.0.1:9"], "needs --tuf-root"),
        (["--tuf-url", "file:///srv/tuf", "--tuf-root", "root.json"], "not an http(s) URL"),
    ],
)
def test_tuf_flags_that_cannot_be_used_are_exit_2(
    signed: tuple[Path, Path], flags: list[str], message: str
) -> None:
    code, output = verify_image(signed[0], *flags)
    assert code == 2 and message in output, output


def test_profile_verify_takes_the_tuf_flags(tmp_path: Path, repo: TufRepo, url: str) -> None:
    pki = PrivateSigstore()
    repo.publish(json.dumps(pki.trusted_root()).encode())
    profile = tmp_path / "team-a.yaml"
    profile.write_text("apiVersion: secureml.dev/v1\nkind: TenantProfile\n")
    bundle = tmp_path / "team-a.yaml.sigstore.json"
    bundle.write_bytes(pki.sign_blob(profile.read_bytes(), subject=BUILDER, issuer=GH))
    (tmp_path / "root.json").write_bytes(repo.root_bytes())
    args = ["profile", "verify", str(profile), "--certificate-identity", BUILDER]
    args += [
        "--certificate-oidc-issuer",
        GH,
        "--tuf-url",
        url,
        "--tuf-root",
        str(tmp_path / "root.json"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
