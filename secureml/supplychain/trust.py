"""Trusted roots for Sigstore verification, loaded offline or refreshed through TUF."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from secureml.core.errors import InputError

if TYPE_CHECKING:
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier
    from sigstore_models.trustroot.v1 import TrustedRoot as TrustedRootDocument

PUBLIC_INSTANCES = ("production", "staging")
_CLIENT_TRUST_CONFIG = "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json"
_SIGNING_CONFIG = "application/vnd.dev.sigstore.signingconfig.v0.2+json"


@dataclass(frozen=True, slots=True)
class LoadedRoot:
    """A trusted root as sigstore-python's `TrustedRoot` (to build a `Verifier`) and as the parsed
    document it was built from (the keys and validity windows secureml checks itself)."""

    trusted_root: TrustedRoot
    document: TrustedRootDocument


@dataclass(frozen=True, slots=True)
class TrustedVerifier:
    """sigstore-python's `Verifier` for one trusted root, with that root's document."""

    verifier: Verifier
    root: TrustedRootDocument


def require_tested_sigstore() -> None:
    """Raise SigstoreVersionError for a sigstore release secureml is not tested with (importing
    sigstore_private checks it); call it before importing anything else of sigstore's."""
    import secureml.supplychain.sigstore_private  # noqa: F401


def resolve_trusted_root(spec: str | Path, *, base_dir: Path | None = None) -> str:
    """`production`, `staging`, or the absolute path of a trusted_root.json (relative to `base_dir`)."""
    text = str(spec)
    if text in PUBLIC_INSTANCES:
        return text
    path = Path(text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path.resolve())


def _embedded_root_path(instance: str) -> Path:
    from secureml.supplychain.sigstore_private import shipped_trust_file

    return Path(str(shipped_trust_file(instance, "trusted_root.json")))


def load_trusted_root(spec: str | Path, *, online: bool = False) -> LoadedRoot:
    """Load `production`, `staging` or a trusted_root.json path; raise InputError if unusable.

    With `online`, a public instance's root comes from its TUF repository: NetworkError when that
    does not answer, TufRefusedError when it serves metadata that does not verify (both exit 2).
    """
    require_tested_sigstore()
    text = str(spec)
    if text in PUBLIC_INSTANCES:
        if online:
            from secureml.supplychain.tuf_refresh import TufRepository, refresh_trusted_root

            path = refresh_trusted_root(TufRepository.public(text))
        else:
            path = _embedded_root_path(text)
    elif online:
        raise InputError(
            f"--online cannot refresh the trusted root {text}",
            why="only the public instances (production, staging) have a TUF repository known "
            "here; a trusted_root.json file would be used as it is, without the refresh asked for",
            fix="drop --online to use the file, or give its TUF repository with --tuf-url and "
            "--tuf-root",
        )
    else:
        path = Path(text)
    try:
        return closed_tsa_windows(path.read_bytes())
    except FileNotFoundError:
        raise InputError(
            f"trusted root {path} does not exist",
            why="signatures can only be checked against a root of trust",
            fix="use 'production', 'staging', or the path of a trusted_root.json",
        ) from None
    except Exception as err:  # noqa: BLE001 - pydantic/JSON/sigstore errors: the file is not a trusted root (fails closed)
        raise InputError(
            f"trusted root {path} cannot be loaded",
            why=f"{type(err).__name__}: {err}".splitlines()[0],
            fix="give a Sigstore trusted_root.json (mediaType application/vnd.dev.sigstore.trustedroot+json;version=0.1)",
        ) from None


def closed_tsa_windows(data: bytes) -> LoadedRoot:
    """The trusted root in `data` with each timestamp authority's `validFor.end` made inclusive,
    as TimeRange specifies.

    sigstore-python 4.x accepts an RFC 3161 timestamp only if `genTime < end`, whereas a trusted
    root's TimeRange is a closed interval (sigstore-conformance
    `trust-root-tsa-validity-end-inclusive`). Both times are microsecond datetimes, so
    `genTime < end + 1 µs` is exactly `genTime <= end`: the end moves by that one microsecond and
    nothing else changes. The start (`start <= genTime`) is already inclusive.

    The document is parsed with sigstore-models, and sigstore-python's `TrustedRoot` built from the
    changed one in memory, through the public `ClientTrustConfig.from_json(...).trusted_root` (a
    trust configuration with no signing services: secureml only verifies); that checks the media
    type as `TrustedRoot.from_file` does. Errors are sigstore's and pydantic's.
    """
    from sigstore.models import ClientTrustConfig
    from sigstore_models.trustroot.v1 import TrustedRoot as TrustedRootDocument

    document = TrustedRootDocument.from_json(data)
    for authority in document.timestamp_authorities:
        window = authority.valid_for
        if window is not None and window.end is not None:
            window.end = window.end + timedelta(microseconds=1)
    config = {
        "mediaType": _CLIENT_TRUST_CONFIG,
        "trustedRoot": json.loads(document.to_json()),
        "signingConfig": {"mediaType": _SIGNING_CONFIG},
    }
    trusted_root = ClientTrustConfig.from_json(json.dumps(config)).trusted_root
    return LoadedRoot(trusted_root, document)


@functools.lru_cache(maxsize=16)
def _cached_verifier(resolved: str, mtime_ns: int, online: bool) -> TrustedVerifier:
    from sigstore.errors import Error as SigstoreError
    from sigstore.verify import Verifier

    loaded = load_trusted_root(resolved, online=online)
    try:
        return TrustedVerifier(Verifier(trusted_root=loaded.trusted_root), loaded.document)
    except SigstoreError as err:
        raise InputError(
            f"trusted root {resolved} cannot be used for verification",
            why=str(err),
            fix="the root must list at least one Fulcio CA and one Rekor log",
        ) from None


def verifier_for(
    spec: str | Path, *, base_dir: Path | None = None, online: bool = False
) -> TrustedVerifier:
    """A (cached) sigstore `Verifier` for a trusted root spec, with the root's document; a changed
    root file is reloaded."""
    require_tested_sigstore()
    resolved = resolve_trusted_root(spec, base_dir=base_dir)
    mtime_ns = 0
    if resolved not in PUBLIC_INSTANCES:
        try:
            mtime_ns = Path(resolved).stat().st_mtime_ns
        except OSError:
            mtime_ns = -1  # load_trusted_root reports the missing file
    return _cached_verifier(resolved, mtime_ns, online)
