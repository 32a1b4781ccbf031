"""Trusted roots for Sigstore verification, loaded offline.

`production` and `staging` are the public-good instances: their `trusted_root.json` is the copy that
sigstore-python ships as the bootstrap of its TUF client, read directly from the installed package,
so verification needs no network and no TUF cache. `online=True` refreshes it through TUF instead.
Anything else names a `trusted_root.json` file (a private Sigstore deployment, or a test root).

Verifiers are cached per root: building one parses certificates and keys, verifying with a warm
one costs only the signature checks.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from secureml.errors import InputError, NetworkError

if TYPE_CHECKING:
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

PUBLIC_INSTANCES = {
    "production": "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev",
    "staging": "https%3A%2F%2Ftuf-repo-cdn.sigstage.dev",
}


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
    store = (
        resources.files("sigstore") / "_store" / PUBLIC_INSTANCES[instance] / "trusted_root.json"
    )
    return Path(str(store))


def load_trusted_root(spec: str | Path, *, online: bool = False) -> TrustedRoot:
    """Load `production`, `staging` or a trusted_root.json path; raise InputError (NetworkError when TUF does not answer) if unusable."""
    from sigstore.models import ClientTrustConfig, TrustedRoot

    text = str(spec)
    if text in PUBLIC_INSTANCES:
        if online:
            try:
                config = (
                    ClientTrustConfig.production()
                    if text == "production"
                    else ClientTrustConfig.staging()
                )
            except Exception as err:  # noqa: BLE001 - TUF raises many types; all mean "could not refresh" (fails closed)
                raise NetworkError(
                    f"cannot refresh the {text} Sigstore trusted root through TUF",
                    why=str(err),
                    fix="check network access, or drop --online to use the root shipped with sigstore",
                ) from None
            return config.trusted_root
        path = _embedded_root_path(text)
    else:
        path = Path(text)
    try:
        return TrustedRoot.from_file(str(path))
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


@functools.lru_cache(maxsize=16)
def _cached_verifier(resolved: str, mtime_ns: int, online: bool) -> Verifier:
    from sigstore.errors import Error as SigstoreError
    from sigstore.verify import Verifier

    root = load_trusted_root(resolved, online=online)
    try:
        return Verifier(trusted_root=root)
    except SigstoreError as err:
        raise InputError(
            f"trusted root {resolved} cannot be used for verification",
            why=str(err),
            fix="the root must list at least one Fulcio CA and one Rekor log",
        ) from None


def verifier_for(
    spec: str | Path, *, base_dir: Path | None = None, online: bool = False
) -> Verifier:
    """A (cached) sigstore `Verifier` for a trusted root spec; a changed root file is reloaded."""
    resolved = resolve_trusted_root(spec, base_dir=base_dir)
    mtime_ns = 0
    if resolved not in PUBLIC_INSTANCES:
        try:
            mtime_ns = Path(resolved).stat().st_mtime_ns
        except OSError:
            mtime_ns = -1  # load_trusted_root reports the missing file
    return _cached_verifier(resolved, mtime_ns, online)
