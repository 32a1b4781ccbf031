"""Refresh a Sigstore trusted root through TUF (`--online`, `--tuf-url`), failing closed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib import parse

from secureml.core.errors import InputError, NetworkError, SecuremlError

TRUSTED_ROOT_TARGET = "trusted_root.json"
PUBLIC_TUF_URLS = {
    "production": "https://tuf-repo-cdn.sigstore.dev",
    "staging": "https://tuf-repo-cdn.sigstage.dev",
}


class TufRefusedError(SecuremlError):
    """The TUF repository answered with metadata the client must not trust (exit 2)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class TufRepository:
    """A TUF repository that publishes a Sigstore trusted root, and the root.json trusted first."""

    url: str
    bootstrap: bytes
    bootstrap_source: str

    @classmethod
    def public(cls, instance: str) -> TufRepository:
        """The production or staging repository, bootstrapped from sigstore-python's shipped root.json."""
        from secureml.supplychain.sigstore_private import shipped_trust_file

        shipped = shipped_trust_file(instance, "root.json").read_bytes()
        return cls(
            PUBLIC_TUF_URLS[instance], shipped, f"sigstore-python's shipped {instance} root.json"
        )

    @classmethod
    def at(cls, url: str, bootstrap_root: Path | None) -> TufRepository:
        """The repository at `url` (`--tuf-url`), trusting `bootstrap_root` (`--tuf-root`) first."""
        url = url.rstrip("/")
        if parse.urlsplit(url).scheme not in ("http", "https") or not parse.urlsplit(url).netloc:
            raise InputError(
                f"--tuf-url {url!r} is not an http(s) URL",
                why="the TUF repository's metadata is fetched over HTTP(S)",
                fix="give the repository's base URL, e.g. https://tuf.example.com (its root.json is at URL/1.root.json)",
            )
        if bootstrap_root is None:
            public = next((name for name, known in PUBLIC_TUF_URLS.items() if known == url), None)
            if public is not None:
                return cls.public(public)
            raise InputError(
                f"--tuf-url {url} needs --tuf-root",
                why="a TUF client must start from a root.json it already trusts; one fetched from the repository itself proves nothing",
                fix="pass the repository's initial root.json, obtained out of band: --tuf-root root.json",
            )
        try:
            data = bootstrap_root.read_bytes()
        except OSError as err:
            raise InputError(
                f"cannot read the TUF root {bootstrap_root}",
                why=err.strerror or str(err),
                fix="give the path of the repository's root.json",
            ) from None
        return cls(url, data, str(bootstrap_root))


def cache_dir(url: str) -> Path:
    """Where the metadata and targets of the repository at `url` are kept between refreshes."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "secureml" / "tuf" / parse.quote(url, safe="")


def refresh_trusted_root(repository: TufRepository) -> Path:
    """Update the repository's TUF metadata and return the path of its verified trusted_root.json."""
    import urllib3
    from securesystemslib.exceptions import StorageError
    from tuf.api import exceptions
    from tuf.ngclient.updater import Updater

    where = cache_dir(repository.url)
    try:
        (where / "metadata").mkdir(parents=True, exist_ok=True)
        (where / "targets").mkdir(parents=True, exist_ok=True)
        updater = Updater(
            metadata_dir=str(where / "metadata"),
            metadata_base_url=repository.url,
            target_dir=str(where / "targets"),
            target_base_url=f"{repository.url}/targets/",
            bootstrap=repository.bootstrap,
        )
    except (OSError, ValueError, exceptions.RepositoryError, StorageError) as err:
        raise InputError(
            f"cannot start a TUF client for {repository.url}",
            why=f"{type(err).__name__}: {err}".splitlines()[0],
            fix=f"check that {repository.bootstrap_source} is the repository's root.json (signed by its own keys) and that {where} is writable",
        ) from None
    try:
        updater.refresh()
        info = updater.get_targetinfo(TRUSTED_ROOT_TARGET)
        if info is None:
            raise TufRefusedError(
                f"the TUF repository {repository.url} has no {TRUSTED_ROOT_TARGET} target",
                why="a Sigstore TUF repository publishes its trusted root as that target",
                fix="check --tuf-url; it must be a Sigstore trust repository",
            )
        return Path(updater.find_cached_target(info) or updater.download_target(info))
    except (exceptions.RepositoryError, exceptions.DownloadLengthMismatchError) as err:
        raise TufRefusedError(
            f"refused the update from TUF repository {repository.url}",
            why=f"{_reason(err)} ({_describe(err)}); the previously fetched root is not used instead",
            fix="the repository, or the path to it, serves stale or forged metadata: ask its operator; "
            "to verify offline, drop --online/--tuf-url (the root shipped with sigstore) or give --trusted-root FILE",
        ) from None
    except (exceptions.DownloadError, urllib3.exceptions.HTTPError) as err:
        raise NetworkError(
            f"the TUF repository {repository.url} did not answer",
            why=_describe(err),
            fix="check network access to it; without --online/--tuf-url the root shipped with sigstore is used, or give --trusted-root FILE",
        ) from None
    except (OSError, StorageError) as err:
        raise InputError(
            f"cannot refresh the trusted root from TUF repository {repository.url}",
            why=f"{type(err).__name__}: {err}".splitlines()[0],
            fix=f"check that {where} is writable",
        ) from None


def _reason(err: Exception) -> str:
    from tuf.api import exceptions

    if isinstance(err, exceptions.BadVersionNumberError):
        return "a metadata version older than one already seen (a rollback)"
    if isinstance(err, exceptions.ExpiredMetadataError):
        return "expired metadata (a freeze, or a repository no longer maintained)"
    if isinstance(err, exceptions.UnsignedMetadataError):
        return "metadata not signed by the keys the root names"
    if isinstance(
        err, (exceptions.LengthOrHashMismatchError, exceptions.DownloadLengthMismatchError)
    ):
        return "a file that does not match the length or hash its metadata records"
    return "metadata that does not verify"


def _describe(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
