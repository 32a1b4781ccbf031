"""Bundle fetch against a real registry: CNCF distribution (`docker-registry`, Debian package
`docker-registry`, 2.8), started by the test on a free local port.

distribution 2.8 has no OCI referrers API (it answers 404), so this covers the `sha256-<hex>`
fallback-tag path end to end on a real registry; the referrers API itself is covered by the OCI
server in tests/supplychain/ociserver.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests

from secureml.images import ImageRef
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.registry import SIGSTORE_BUNDLE_TYPES, fetch_bundles
from secureml.supplychain.verifier import SignatureVerifier

from .conftest import BEACON, CONFORMANCE, GITHUB_ISSUER

REGISTRY_BIN = shutil.which("docker-registry")
pytestmark = pytest.mark.skipif(
    REGISTRY_BIN is None,
    reason="docker-registry not installed (Debian: apt-get install docker-registry)",
)
BUNDLE_TYPE = SIGSTORE_BUNDLE_TYPES[0]
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("registry")
    host = f"127.0.0.1:{free_port()}"
    config = work / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work / 'data'}\nhttp:\n  addr: {host}\n"
    )
    process = subprocess.Popen(
        [REGISTRY_BIN, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                if requests.get(f"http://{host}/v2/", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail("docker-registry did not start")
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
    """Push the bundle as an OCI artifact and list it under the referrers fallback tag."""
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
            "mediaType": "application/vnd.oci.image.index.v1+json",
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
    tag = "sha256-" + subject_digest.split(":", 1)[1]
    requests.put(
        f"{base}/manifests/{tag}",
        data=index,
        headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
        timeout=10,
    ).raise_for_status()
    return digest_of(manifest)


def test_fetch_through_fallback_tag_and_verify(registry):
    bundle = (CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json").read_bytes()
    subject = "sha256:" + hashlib.sha256((CONFORMANCE / "a.txt").read_bytes()).hexdigest()
    manifest = attach_like_cosign(registry, "acme/train", subject, bundle)
    ref = ImageRef.parse(f"{registry}/acme/train@{subject}")
    [found] = fetch_bundles(ref)
    assert found.content == bundle
    assert (
        found.source
        == f"{registry}/acme/train@{manifest} (fallback tag sha256-{subject.split(':')[1]})"
    )
    signed = SignatureVerifier("production").verify_image(
        ref, found.content, [TrustedIdentity(issuer=GITHUB_ISSUER, subject=BEACON)]
    )
    assert signed.signer == BEACON


def test_nothing_attached(registry):
    from secureml.supplychain.verifier import SignatureError

    with pytest.raises(SignatureError) as err:
        fetch_bundles(ImageRef.parse(f"{registry}/acme/none@sha256:{'e' * 64}"))
    assert err.value.kind == "missing" and "no Sigstore bundle is attached" in err.value.what
