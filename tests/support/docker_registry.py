"""A real OCI registry for tests: CNCF distribution (Debian's `docker-registry`, 2.8) on a free
loopback port, and attaching a Sigstore bundle to an image the way cosign does on a registry
without the referrers API (the `sha256-<hex>` fallback tag). Used by the `docker_registry`
fixture (tests/conftest.py): tests/supplychain/test_real_registry.py and tests/images.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

REGISTRY_BIN = shutil.which("docker-registry")
INSTALL_HINT = "docker-registry not installed (Debian: apt-get install docker-registry)"
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def digest_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_registry(work: Path) -> Iterator[str]:
    """Start docker-registry with its storage under `work`; yield its `host:port`."""
    assert REGISTRY_BIN is not None, INSTALL_HINT
    host = f"127.0.0.1:{free_port()}"
    config = work / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n"
        f"http:\n  addr: {host}\n"
    )
    process = subprocess.Popen(
        [REGISTRY_BIN, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(200):
            try:
                if requests.get(f"http://{host}/v2/", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.05)
        else:
            raise RuntimeError("docker-registry did not start")
        yield host
    finally:
        process.terminate()
        process.wait(timeout=10)


def push_blob(base: str, content: bytes) -> None:
    started = requests.post(f"{base}/blobs/uploads/", timeout=10)
    started.raise_for_status()
    location = started.headers["Location"]
    location = location if location.startswith("http") else base.split("/v2/")[0] + location
    joiner = "&" if "?" in location else "?"
    requests.put(
        f"{location}{joiner}digest={digest_of(content)}",
        data=content,
        headers={"Content-Type": "application/octet-stream"},
        timeout=10,
    ).raise_for_status()


def attach_like_cosign(host: str, repository: str, subject_digest: str, bundle: bytes) -> str:
    """Push the bundle as an OCI artifact and list it under the referrers fallback tag; return the
    artifact manifest's digest."""
    base = f"http://{host}/v2/{repository}"
    empty = b"{}"
    push_blob(base, empty)
    push_blob(base, bundle)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": BUNDLE_TYPE,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": digest_of(empty),
                "size": 2,
            },
            "layers": [
                {"mediaType": BUNDLE_TYPE, "digest": digest_of(bundle), "size": len(bundle)}
            ],
            "subject": {"mediaType": MANIFEST, "digest": subject_digest, "size": 512},
        }
    ).encode()
    requests.put(
        f"{base}/manifests/{digest_of(manifest)}",
        data=manifest,
        headers={"Content-Type": MANIFEST},
        timeout=10,
    ).raise_for_status()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": digest_of(manifest),
                    "size": len(manifest),
                    "artifactType": BUNDLE_TYPE,
                }
            ],
        }
    ).encode()
    requests.put(
        f"{base}/manifests/sha256-{subject_digest.split(':', 1)[1]}",
        data=index,
        headers={"Content-Type": INDEX},
        timeout=10,
    ).raise_for_status()
    return digest_of(manifest)
