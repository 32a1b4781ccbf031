"""A TUF repository for the tests, built with python-tuf's metadata API and served on localhost.

It publishes `trusted_root.json` as a target, as Sigstore's TUF repositories do: root, targets,
snapshot and timestamp metadata, one Ed25519 key per role, no consistent snapshots (so the files
are `timestamp.json`, `snapshot.json`, `targets.json`, `N.root.json`, `targets/trusted_root.json`).
`publish()` writes a new version of everything; the tests then overwrite files to stage attacks
(an older timestamp, an expired one, one signed by another key).
"""

from __future__ import annotations

import datetime as dt
import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import (
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization.json import JSONSerializer

ROLES = ("root", "targets", "snapshot", "timestamp")


def _in(days: float) -> dt.datetime:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).replace(microsecond=0)


class TufRepo:
    """The repository's metadata and signing keys, written to `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "targets").mkdir(parents=True, exist_ok=True)
        self.signers = {role: CryptoSigner.generate_ed25519() for role in ROLES}
        root = Root(expires=_in(365), consistent_snapshot=False)
        for role in ROLES:
            root.add_key(self.signers[role].public_key, role)
        self.root = Metadata(root)
        self.targets = Metadata(Targets(expires=_in(30)))
        self.snapshot = Metadata(Snapshot(expires=_in(7)))
        self.timestamp = Metadata(Timestamp(expires=_in(1)))
        self._write(self.root, "root", f"{root.version}.root.json")

    def root_bytes(self) -> bytes:
        """The initial root.json (version 1): what a client is bootstrapped with."""
        return (self.directory / "1.root.json").read_bytes()

    def publish(self, trusted_root: bytes, *, timestamp_expires: dt.datetime | None = None) -> None:
        """A new version of targets, snapshot and timestamp, with `trusted_root` as the target."""
        (self.directory / "targets" / "trusted_root.json").write_bytes(trusted_root)
        self.targets.signed.targets = {
            "trusted_root.json": TargetFile.from_data("trusted_root.json", trusted_root)
        }
        for metadata in (self.targets, self.snapshot, self.timestamp):
            metadata.signed.version += 1
        self.snapshot.signed.meta["targets.json"] = MetaFile(version=self.targets.signed.version)
        self.timestamp.signed.snapshot_meta = MetaFile(version=self.snapshot.signed.version)
        self.timestamp.signed.expires = timestamp_expires or _in(1)
        self._write(self.targets, "targets", "targets.json")
        self._write(self.snapshot, "snapshot", "snapshot.json")
        self._write(self.timestamp, "timestamp", "timestamp.json")

    def rotate(self, role: str) -> CryptoSigner:
        """Root version N+1 with a new key for `role` (signed by the root key); returns the old signer."""
        old = self.signers[role]
        self.signers[role] = CryptoSigner.generate_ed25519()
        root = self.root.signed
        root.revoke_key(old.public_key.keyid, role)
        root.add_key(self.signers[role].public_key, role)
        root.version += 1
        self._write(self.root, "root", f"{root.version}.root.json")
        return old

    def files(self) -> dict[str, bytes]:
        """Every file served now, to put back later (a rollback)."""
        return {
            str(p.relative_to(self.directory)): p.read_bytes()
            for p in self.directory.rglob("*")
            if p.is_file()
        }

    def restore(self, files: dict[str, bytes]) -> None:
        for name, data in files.items():
            (self.directory / name).write_bytes(data)

    def write_timestamp(
        self, *, version: int, snapshot_version: int, signer: CryptoSigner | None = None
    ) -> None:
        """Serve a timestamp of any version and content, signed by the timestamp key or `signer`."""
        forged = Metadata(
            Timestamp(
                version=version,
                expires=_in(1),
                snapshot_meta=MetaFile(version=snapshot_version),
            )
        )
        forged.sign(signer or self.signers["timestamp"])
        (self.directory / "timestamp.json").write_bytes(forged.to_bytes(JSONSerializer()))

    def _write(self, metadata: Metadata, role: str, name: str) -> None:  # type: ignore[type-arg]
        metadata.signatures.clear()
        metadata.sign(self.signers[role])
        (self.directory / name).write_bytes(metadata.to_bytes(JSONSerializer()))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` over HTTP on 127.0.0.1 from a thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
