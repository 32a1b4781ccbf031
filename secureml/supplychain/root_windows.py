"""The trusted root's validity windows, checked at the signing time (sigstore-python 4.x does not)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sigstore.models import Bundle

    from secureml.supplychain.trust import TrustedVerifier


class WindowError(Exception):
    """A key or CA of the trusted root vouched for something outside its validity window."""


def check_root_windows(verifier: TrustedVerifier, bundle: Bundle) -> None:
    """Raise WindowError unless the CA, log and CT keys were within their windows at signing time."""
    from cryptography import x509
    from sigstore_models.bundle.v1 import Bundle as BundleMessage

    from secureml.supplychain.sigstore_private import verified_times

    root = verifier.root
    leaf = bundle.signing_certificate
    times = verified_times(verifier.verifier, bundle)

    issuing = [
        authority
        for authority in root.certificate_authorities
        if any(
            _issued_by(leaf, x509.load_der_x509_certificate(cert.raw_bytes))
            for cert in authority.cert_chain.certificates
        )
    ]
    for time in times:
        if not any(_within(authority.valid_for, time) for authority in issuing):
            raise WindowError(
                f"no certificate authority of the trusted root that issued the signing certificate was valid at {_iso(time)}"
            )

    (entry,) = BundleMessage.from_json(bundle.to_json()).verification_material.tlog_entries
    if entry.integrated_time:
        integrated = dt.datetime.fromtimestamp(entry.integrated_time, tz=dt.UTC)
        logs = [log for log in root.tlogs if log.log_id.key_id == entry.log_id.key_id]
        if not any(_within(log.public_key.valid_for, integrated) for log in logs):
            raise WindowError(
                f"the transparency log key of this entry was not valid at its integrated time {_iso(integrated)}"
            )

    (sct,) = leaf.extensions.get_extension_for_class(
        x509.PrecertificateSignedCertificateTimestamps
    ).value  # sigstore-python has verified that there is exactly one
    ct_logs = [log for log in root.ctlogs if log.log_id.key_id == sct.log_id]
    if not any(_within(log.public_key.valid_for, _aware(sct.timestamp)) for log in ct_logs):
        raise WindowError(
            f"the CT log key of the certificate's SCT was not valid at the SCT's time {_iso(_aware(sct.timestamp))}"
        )


def _issued_by(leaf: Any, issuer: Any) -> bool:
    try:
        leaf.verify_directly_issued_by(issuer)
    except Exception:  # noqa: BLE001 - InvalidSignature, ValueError, TypeError (key type): not this issuer
        return False
    return True


def _within(window: Any, time: dt.datetime) -> bool:
    if window is None:
        return True
    return bool(window.start <= time and (window.end is None or time <= window.end))


def _aware(time: dt.datetime) -> dt.datetime:
    return time if time.tzinfo is not None else time.replace(tzinfo=dt.UTC)


def _iso(time: dt.datetime) -> str:
    return time.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
