"""A local SPIFFE Workload API with a throwaway CA, for tests and `secureml run --dev-identity`.

Imports grpc at the top: import this module lazily (docs/local-run.md).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from spiffe._proto import workload_pb2, workload_pb2_grpc

from secureml.core.errors import SecuremlError

WORKLOAD_API_HEADER = ("workload.spiffe.io", "true")
SVID_TTL = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Workload:
    """What the server learnt about the process on the other end of a connection."""

    pid: int
    uid: int
    gid: int
    env: dict[str, str] = field(default_factory=dict)


IdentityFor = Callable[[Workload], str | None]


def _same_for_every_caller(spiffe_id: str) -> IdentityFor:
    return lambda _workload: spiffe_id


@dataclass(frozen=True)
class IssuedSvid:
    """One X.509-SVID as the Workload API hands it out (all DER)."""

    spiffe_id: str
    chain_der: bytes
    key_der: bytes
    not_before: dt.datetime
    not_after: dt.datetime


class DevCA:
    """A throwaway certificate authority for one trust domain (EC P-256, in memory only)."""

    def __init__(self, trust_domain: str) -> None:
        self.trust_domain = trust_domain
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "secureml dev identity"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"throwaway CA for {trust_domain}"),
            ]
        )
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.UniformResourceIdentifier(f"spiffe://{trust_domain}")]
                ),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def bundle_der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    @property
    def bundle_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, spiffe_id: str, *, not_after: dt.datetime | None = None) -> IssuedSvid:
        """An X.509-SVID for `spiffe_id` (URI SAN), valid for an hour from now or, given
        `not_after`, for the hour before it."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        if not_after is None:
            not_before, not_after = now - dt.timedelta(seconds=30), now + SVID_TTL
        else:
            not_before = not_after - SVID_TTL
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SPIRE")]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_id)]),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        key_der = key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return IssuedSvid(
            spiffe_id=spiffe_id,
            chain_der=leaf.public_bytes(serialization.Encoding.DER),
            key_der=key_der,
            not_before=not_before,
            not_after=not_after,
        )


class DevWorkloadAPI:
    """A SPIFFE Workload API on `socket_path`; use as a context manager.

    `spiffe_id` is either the one ID every caller gets or a function from the attested
    `Workload` to its ID (`None` denies). The trust domain is taken from the ID unless given.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        spiffe_id: str | IdentityFor,
        *,
        trust_domain: str | None = None,
    ) -> None:
        if trust_domain is None:
            if not isinstance(spiffe_id, str):
                raise ValueError("trust_domain is required when spiffe_id is a function")
            trust_domain = _trust_domain_of(spiffe_id)
        self.socket_path = Path(socket_path)
        self.ca = DevCA(trust_domain)
        self._identity_for: IdentityFor = (
            _same_for_every_caller(spiffe_id) if isinstance(spiffe_id, str) else spiffe_id
        )
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._backends: dict[str, tuple[Any, Path]] = {}
        self._open_sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._backend_dir: tempfile.TemporaryDirectory[str] | None = None
        self.workloads: list[Workload] = []  # every attested caller, for tests and reports

    @property
    def endpoint(self) -> str:
        """The value for SPIFFE_ENDPOINT_SOCKET."""
        return f"unix://{self.socket_path.resolve()}"

    @property
    def bundle_pem(self) -> bytes:
        return self.ca.bundle_pem

    def __enter__(self) -> DevWorkloadAPI:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if len(os.fsencode(self.socket_path.resolve())) > 100:
            raise SecuremlError(
                f"the Workload API socket path is too long: {self.socket_path}",
                why="unix socket paths are limited to about 100 bytes",
                fix="choose a shorter directory for the socket",
            )
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._backend_dir = tempfile.TemporaryDirectory(prefix="secureml-wl-")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="dev-workload-api", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            _close_quietly(self._listener)  # shutdown() also wakes the thread blocked in accept()
            self._listener = None
        with self._lock:
            for sock in list(self._open_sockets):
                _close_quietly(sock)
            self._open_sockets.clear()
            backends = list(self._backends.values())
            self._backends.clear()
        for server, _path in backends:
            server.stop(grace=None)
        if self._backend_dir is not None:
            self._backend_dir.cleanup()
            self._backend_dir = None
        self.socket_path.unlink(missing_ok=True)

    # --- connection handling -------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            self._track(conn)
            self._on_connection(conn)

    def _on_connection(self, conn: socket.socket) -> None:
        """Attest the caller and relay the connection to its identity's server (a thread)."""
        threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _before_answer(self, context: grpc.ServicerContext) -> None:
        """Called for each admitted call before it is answered (a test double's hook)."""

    def _issue(self, spiffe_id: str) -> IssuedSvid:
        """The SVID a call for `spiffe_id` is answered with."""
        return self.ca.issue(spiffe_id)

    def _serve_connection(self, conn: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            workload = _attest(conn)
            self.workloads.append(workload)
            upstream.connect(str(self._backend_for(self._identity_for(workload))))
        except Exception:  # noqa: BLE001 - a caller we cannot attest, or a registration that raised: hang up (no identity served)
            _close_quietly(upstream)
            _close_quietly(conn)
            return
        self._track(upstream)
        threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
        _pump(conn, upstream)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            if self._stopping.is_set():
                _close_quietly(sock)
            else:
                self._open_sockets.add(sock)

    def _backend_for(self, spiffe_id: str | None) -> Path:
        """The socket of the internal gRPC server that answers as `spiffe_id` (started lazily)."""
        key = spiffe_id or ""
        with self._lock:
            if key in self._backends:
                return self._backends[key][1]
            assert self._backend_dir is not None
            path = Path(self._backend_dir.name) / f"{len(self._backends)}.sock"
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            workload_pb2_grpc.add_SpiffeWorkloadAPIServicer_to_server(
                _Servicer(self, spiffe_id), server
            )
            server.add_insecure_port(f"unix:{path}")
            server.start()
            self._backends[key] = (server, path)
            return path


class _Servicer(workload_pb2_grpc.SpiffeWorkloadAPIServicer):
    """The Workload API as seen by one attested workload (X.509 only; the JWT methods keep the
    generated base class's UNIMPLEMENTED answer)."""

    def __init__(self, api: DevWorkloadAPI, spiffe_id: str | None) -> None:
        self._api = api
        self._spiffe_id = spiffe_id

    def FetchX509SVID(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802 (gRPC name)
        self._admit(context)
        assert self._spiffe_id is not None
        svid = self._api._issue(self._spiffe_id)
        yield workload_pb2.X509SVIDResponse(
            svids=[
                workload_pb2.X509SVID(
                    spiffe_id=svid.spiffe_id,
                    x509_svid=svid.chain_der,
                    x509_svid_key=svid.key_der,
                    bundle=self._api.ca.bundle_der,
                )
            ]
        )
        self._hold_stream(context)

    def FetchX509Bundles(self, request: Any, context: Any) -> Iterator[Any]:  # noqa: N802
        self._admit(context)
        domain_id = f"spiffe://{self._api.ca.trust_domain}"
        yield workload_pb2.X509BundlesResponse(bundles={domain_id: self._api.ca.bundle_der})
        self._hold_stream(context)

    def _admit(self, context: Any) -> None:
        """SPIRE's checks, in its order: the security header, then an identity for the caller."""
        if WORKLOAD_API_HEADER not in tuple(context.invocation_metadata()):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "security header missing from request")
        self._api._before_answer(context)
        if self._spiffe_id is None:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "no identity issued")

    def _hold_stream(self, context: Any) -> None:
        """Keep the stream open like SPIRE does (it pushes rotations) until the client leaves."""
        while context.is_active() and not self._api._stopping.wait(0.2):
            pass


def _attest(conn: socket.socket) -> Workload:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return Workload(pid=pid, uid=uid, gid=gid, env=_process_env(pid))


def _process_env(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (empty when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either side closes, then close both."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close_quietly(source)
        _close_quietly(sink)


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _trust_domain_of(spiffe_id: str) -> str:
    prefix = "spiffe://"
    if not spiffe_id.startswith(prefix) or not spiffe_id[len(prefix) :].split("/")[0]:
        raise ValueError(f"not a SPIFFE ID: {spiffe_id!r}")
    return spiffe_id[len(prefix) :].split("/")[0]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
