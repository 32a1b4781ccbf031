"""The only module that uses sigstore-python's private APIs: checks it has no public entry point for.

Refuses an untested sigstore release; docs/sigstore-conformance.md lists the names and why.
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
