"""The only module that uses sigstore-python's private APIs: checks it has no public entry point for.

sigstore-python 4.x offers `Verifier.verify_artifact` and `Verifier.verify_dsse`, which secureml
uses for every bundle they accept. Four checks need more (docs/sigstore-conformance.md), and each
reuses sigstore-python's own code through these private names:

* `Verifier._verify_common_signing_cert`: its verification steps 0-6 (verified times, chain, SCT,
  policy, inclusion proof, checkpoint, signed entry timestamp) for a DSSE bundle logged as a Rekor
  v1 `intoto` 0.0.2 entry, which `verify_dsse` refuses (intoto_entry.py; conformance
  `intoto-with-custom-trust-root`);
* `Verifier._establish_time`: the times it verified a bundle at, to check the trusted root's
  validity windows at the signing time, which it compares with now only (root_windows.py);
* `sigstore.models.TransparencyLogEntry` built from a `sigstore_models` entry (its constructor is
  `@private`), its `_verify`, and `sigstore._internal.trust.Keyring` / `RekorKeyring`: the Merkle
  inclusion proof, signed checkpoint and signed entry timestamp of a managed-key bundle's entry by
  one log's key, since `Bundle` refuses a public-key bundle (managed_key.py; conformance
  `managed-key-*`);
* the package data `sigstore/_store/<instance>/`: the production and staging `trusted_root.json`
  and TUF `root.json` sigstore-python ships, read offline (trust.py, tuf_refresh.py).

Importing this module checks the installed sigstore against `TESTED`, the releases the conformance
suite and tests/supplychain pass with, and refuses any other with a `SigstoreVersionError`. The
proposed public API that would retire this module: docs/upstream/sigstore-python-public-verify.md.
"""

from __future__ import annotations

import re
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING

import sigstore

from secureml.core.errors import SecuremlError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from sigstore.models import Bundle
    from sigstore.verify import Verifier
    from sigstore.verify.policy import VerificationPolicy
    from sigstore_models.common.v1 import PublicKey
    from sigstore_models.rekor.v1 import TransparencyLogEntry

# The releases the conformance suite and tests/supplychain pass with (4.3.0 to 4.5.1): from the
# first, up to and excluding the second; pyproject.toml requires the same range. 4.1 and 4.2 fail
# conformance cases in their public verification (SCT extensions, Rekor v2 DSSE entries).
TESTED = ((4, 3, 0), (4, 6, 0))


class SigstoreVersionError(SecuremlError):
    """The installed sigstore-python is a release secureml's private uses were not tested with."""

    exit_code = 2


def check_sigstore_version(version: str) -> None:
    """Raise SigstoreVersionError unless `version` lies in the tested range."""
    low, high = TESTED
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    release = tuple(int(part) for part in match.groups()) if match else None
    if release is None or not low <= release < high:
        raise SigstoreVersionError(
            f"sigstore {version} is installed; secureml is tested with sigstore "
            f">={_dotted(low)},<{_dotted(high)}",
            why="the sigstore-conformance suite passes with these releases only, and secureml's "
            "checks of intoto log entries, trusted-root validity windows and managed-key bundles "
            "call sigstore-python APIs that are private and may change in any other release",
            fix=f"install a tested release: pip install 'sigstore>={_dotted(low)},<{_dotted(high)}'",
        )


def _dotted(release: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in release)


check_sigstore_version(sigstore.__version__)


def verify_signing_certificate(
    verifier: Verifier, bundle: Bundle, policy: VerificationPolicy
) -> None:
    """sigstore-python's verification steps 0-6 of a certificate bundle; raises its errors."""
    verifier._verify_common_signing_cert(bundle, policy)


def verified_times(verifier: Verifier, bundle: Bundle) -> list[datetime]:
    """The times sigstore-python verified the bundle at: RFC 3161 timestamps a trusted TSA signed,
    and the integrated time under an inclusion promise."""
    return [result.time for result in verifier._establish_time(bundle)]


def verify_log_entry(entry: TransparencyLogEntry, log_key: PublicKey) -> None:
    """The entry's inclusion proof, checkpoint and signed entry timestamp, by `log_key` alone."""
    from sigstore._internal.trust import Keyring, RekorKeyring
    from sigstore.models import TransparencyLogEntry as LogEntry

    LogEntry(entry)._verify(RekorKeyring(Keyring([log_key])))


# Where sigstore-python keeps each public instance's files: its TUF repository's URL, quoted.
_STORE_FOLDERS = {
    "production": "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev",
    "staging": "https%3A%2F%2Ftuf-repo-cdn.sigstage.dev",
}


def shipped_trust_file(instance: str, name: str) -> Traversable:
    """A file sigstore-python ships for `production` or `staging`: `trusted_root.json`, or the TUF
    `root.json` its client bootstraps from."""
    return resources.files("sigstore") / "_store" / _STORE_FOLDERS[instance] / name
