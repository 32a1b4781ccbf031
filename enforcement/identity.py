"""Launcher stage 1: fetch the step's X.509-SVID from the SPIFFE Workload API and check it.

The SVID's SPIFFE ID must equal the ID the compiler expects for this step, exactly; it must be
valid now and chain to the trust domain's bundle. The chain, key and bundle are written as PEM into
a private folder (0700, files 0600) whose paths are exported to the step (`SECUREML_SVID_*`).

The `spiffe` client can wait forever on a Workload API that accepts a connection and never
answers, so the fetch carries a gRPC deadline and runs in a thread that is abandoned (and its
channel closed) when the deadline passes. grpc and spiffe are imported only when the stage runs.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secureml.core import contract
from secureml.core.errors import SecuremlError

CERT_FILE = "svid.pem"
KEY_FILE = "svid_key.pem"
BUNDLE_FILE = "bundle.pem"


class IdentityError(SecuremlError):
    """The step could not prove the identity the compiler expects for it."""


@dataclass(frozen=True)
class IdentityResult:
    """A checked SVID and where its PEM files are."""

    spiffe_id: str
    not_before: dt.datetime
    not_after: dt.datetime
    cert_path: Path
    key_path: Path
    bundle_path: Path
    elapsed_s: float

    @property
    def env(self) -> dict[str, str]:
        """The variables to export to the step."""
        return {
            contract.ENV_SVID_CERT: str(self.cert_path),
            contract.ENV_SVID_KEY: str(self.key_path),
            contract.ENV_SVID_BUNDLE: str(self.bundle_path),
        }

    def to_record(self) -> dict[str, Any]:
        """The audit record's view of the identity (no key material)."""
        return {
            "spiffe_id": self.spiffe_id,
            "not_before": self.not_before.isoformat(),
            "not_after": self.not_after.isoformat(),
            "files": self.env,
            "seconds": round(self.elapsed_s, 4),
        }


def socket_path_of(endpoint: str) -> Path:
    """The filesystem path of a Workload API endpoint (`unix:///p`, `unix:/p` or `/p`)."""
    path = endpoint.removeprefix("unix:")
    if not path.startswith("/"):
        raise IdentityError(
            f"the Workload API endpoint {endpoint!r} is not a unix socket path",
            why="the SPIFFE Workload API is served on a unix domain socket",
            fix=f"set {contract.SPIFFE_SOCKET_ENV} to unix:///path/to/agent.sock",
            where=contract.SPIFFE_SOCKET_ENV,
        )
    return Path("/" + path.lstrip("/"))


def fetch_and_check_identity(
    expected_spiffe_id: str, socket: str, out_dir: Path, timeout_s: float
) -> IdentityResult:
    """Fetch the SVID from the Workload API at `socket`, check it, write it to `out_dir`."""
    started = time.monotonic()
    path = socket_path_of(socket)
    where = f"Workload API {socket}"
    if not path.exists():
        raise IdentityError(
            f"no Workload API socket at {path}; cannot prove the identity {expected_spiffe_id}",
            why="the step's identity is required and only the SPIFFE Workload API can vouch for it",
            fix=(
                "in a cluster, check that the SPIFFE CSI driver mounts the agent socket into the pod "
                "(the tenant bundle's mutating policy adds it); locally, run with "
                "`secureml run --dev-identity`"
            ),
            where=where,
        )
    context = _fetch_x509_context(socket, expected_spiffe_id, timeout_s, where)
    svid = context.default_svid
    got = str(svid.spiffe_id)
    if got != expected_spiffe_id:
        raise IdentityError(
            f"the Workload API issued {got}, but this step must run as {expected_spiffe_id}",
            why="a step may only start under the SPIFFE ID the compiler assigned to it",
            fix=(
                "check the registration (ClusterSPIFFEID) rendered from the tenant profile and the "
                "pod's secureml.dev/pipeline and secureml.dev/step labels"
            ),
            where=where,
        )
    leaf = svid.leaf
    not_before, not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    now = dt.datetime.now(dt.UTC)
    if not (not_before <= now <= not_after):
        raise IdentityError(
            f"the SVID for {got} is not valid now ({now:%Y-%m-%dT%H:%M:%SZ}): "
            f"valid from {not_before:%Y-%m-%dT%H:%M:%SZ} to {not_after:%Y-%m-%dT%H:%M:%SZ}",
            why="an expired or not-yet-valid SVID proves nothing",
            fix="check the SPIRE agent's rotation and the node's clock",
            where=where,
        )
    bundle = context.x509_bundle_set.get_bundle_for_trust_domain(svid.spiffe_id.trust_domain)
    authorities = list(bundle.x509_authorities) if bundle is not None else []
    _check_chain(svid.cert_chain, authorities, got, where)
    cert_path, key_path, bundle_path = _write_private_files(
        out_dir, svid.cert_chain, svid.private_key, authorities
    )
    return IdentityResult(
        spiffe_id=got,
        not_before=not_before,
        not_after=not_after,
        cert_path=cert_path,
        key_path=key_path,
        bundle_path=bundle_path,
        elapsed_s=time.monotonic() - started,
    )


def _fetch_x509_context(endpoint: str, expected: str, timeout_s: float, where: str) -> Any:
    """`WorkloadApiClient.fetch_x509_context` with a deadline that holds even if gRPC hangs."""
    from spiffe import WorkloadApiClient

    outcome: dict[str, Any] = {}
    clients: list[Any] = []
    done = threading.Event()

    def fetch() -> None:
        try:
            client = WorkloadApiClient(endpoint, default_timeout=timeout_s)
            clients.append(client)
            with client:
                outcome["context"] = client.fetch_x509_context(timeout=timeout_s)
        except Exception as err:  # noqa: BLE001 - any failure of the fetch thread is re-raised below as IdentityError (fails closed)
            outcome["error"] = err
        finally:
            done.set()

    threading.Thread(target=fetch, name="secureml-identity", daemon=True).start()
    answered = done.wait(timeout_s)
    if not answered or "DEADLINE_EXCEEDED" in str(outcome.get("error", "")):
        for client in clients:
            _close_quietly(client)
        raise IdentityError(
            f"the Workload API did not answer within {timeout_s:g} s; "
            f"cannot prove the identity {expected}",
            why="the step's identity is required and the agent behind the socket did not respond",
            fix=(
                "check that the SPIRE agent is running and healthy, or raise "
                f"{contract.ENV_IDENTITY_TIMEOUT}"
            ),
            where=where,
        )
    if "StatusCode.UNAVAILABLE" in str(outcome.get("error", "")):
        raise IdentityError(
            f"nothing answers on the Workload API socket; cannot prove the identity {expected}: "
            f"{outcome['error']}",
            why="the socket exists but no SPIRE agent listens on it (stopped or crashed)",
            fix="check that the SPIRE agent on this node is running and healthy, then rerun the step",
            where=where,
        )
    if "error" in outcome:
        raise IdentityError(
            f"fetching the X.509-SVID for {expected} failed: {outcome['error']}",
            why="the Workload API refused or could not serve an identity for this workload",
            fix=(
                "check that a registration entry matches this pod (the ClusterSPIFFEID of the "
                "tenant bundle) and that the agent is attesting workloads"
            ),
            where=where,
        )
    return outcome["context"]


def _check_chain(chain: list[Any], authorities: list[Any], got: str, where: str) -> None:
    """Each certificate is signed by the next; the last by an authority of the bundle."""
    from cryptography.exceptions import InvalidSignature

    # What `Certificate.verify_directly_issued_by` raises: a bad signature, an issuer name that is
    # not the parent's subject or an unsupported algorithm (ValueError), an unsupported key type.
    not_issued = (InvalidSignature, ValueError, TypeError)
    for child, parent in itertools.pairwise(chain):
        try:
            child.verify_directly_issued_by(parent)
        except not_issued as err:
            raise IdentityError(
                f"the SVID chain for {got} is broken: {err}",
                why="a certificate that is not signed by its issuer proves nothing",
                fix="check the SPIRE server's CA configuration",
                where=where,
            ) from None
    for authority in authorities:
        try:
            chain[-1].verify_directly_issued_by(authority)
            return
        except not_issued:
            continue
    raise IdentityError(
        f"the SVID for {got} does not chain to the trust domain's bundle",
        why="an SVID that the trust domain's CA did not sign can be forged by anyone",
        fix="check that the agent serves the bundle of the trust domain the SVID names",
        where=where,
    )


def _write_private_files(
    out_dir: Path, chain: list[Any], key: Any, authorities: list[Any]
) -> tuple[Path, Path, Path]:
    from cryptography.hazmat.primitives import serialization

    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(out_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise IdentityError(
            f"{out_dir} is not a directory owned by this user",
            why="the SVID's private key must be written where only the step can read it",
            fix=f"point {contract.ENV_IDENTITY_DIR} at a fresh private folder",
            where=str(out_dir),
        )
    os.chmod(out_dir, 0o700)
    pem = serialization.Encoding.PEM
    contents = {
        CERT_FILE: b"".join(cert.public_bytes(pem) for cert in chain),
        KEY_FILE: key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        BUNDLE_FILE: b"".join(cert.public_bytes(pem) for cert in authorities),
    }
    for name, data in contents.items():
        fd = os.open(out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # the file may have existed with wider permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return out_dir / CERT_FILE, out_dir / KEY_FILE, out_dir / BUNDLE_FILE


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - best-effort close of a client being abandoned; the caller raises IdentityError
        pass
