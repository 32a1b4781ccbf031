"""A small OCI distribution (v1.1) server for tests: token auth, manifests, blobs, referrers.

It speaks the endpoints a client uses to find Sigstore bundles, with the spec's status codes and
media types. `referrers_api=False` makes it answer 404 on the referrers endpoint, like a registry
that predates OCI 1.1, so clients must use the `sha256-<hex>` fallback tag.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = b"{}"
TOKEN = "test-token-1"


def digest_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


class OciServer:
    def __init__(self, *, referrers_api: bool = True) -> None:
        self.referrers_api = referrers_api
        self.blobs: dict[str, bytes] = {digest_of(EMPTY_CONFIG): EMPTY_CONFIG}
        self.manifests: dict[str, tuple[bytes, str]] = {}  # digest or "repo:tag" -> (content, type)
        self.referrers: dict[
            tuple[str, str], list[dict]
        ] = {}  # (repo, subject digest) -> descriptors
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OciServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def attach_bundle(
        self, repo: str, subject_digest: str, bundle: bytes, *, artifact_type: str = BUNDLE_TYPE
    ) -> str:
        """Push `bundle` as a cosign-v3-style referrer of `subject_digest`; return the manifest digest."""
        self.blobs[digest_of(bundle)] = bundle
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "artifactType": artifact_type,
                "config": {
                    "mediaType": "application/vnd.oci.empty.v1+json",
                    "digest": digest_of(EMPTY_CONFIG),
                    "size": 2,
                },
                "layers": [
                    {"mediaType": artifact_type, "digest": digest_of(bundle), "size": len(bundle)}
                ],
                "subject": {"mediaType": MANIFEST_TYPE, "digest": subject_digest, "size": 1234},
            }
        ).encode()
        manifest_digest = digest_of(manifest)
        self.manifests[manifest_digest] = (manifest, MANIFEST_TYPE)
        descriptor = {
            "mediaType": MANIFEST_TYPE,
            "digest": manifest_digest,
            "size": len(manifest),
            "artifactType": artifact_type,
        }
        self.referrers.setdefault((repo, subject_digest), []).append(descriptor)
        # The fallback tag holds the same list as an image index.
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": INDEX_TYPE,
                "manifests": self.referrers[(repo, subject_digest)],
            }
        ).encode()
        self.manifests[f"{repo}:sha256-{subject_digest.split(':', 1)[1]}"] = (index, INDEX_TYPE)
        return manifest_digest

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _send(
                self,
                status: int,
                body: bytes = b"",
                content_type: str = "application/json",
                extra: dict | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                if self.path.startswith("/token"):
                    return self._send(200, json.dumps({"token": TOKEN}).encode())
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    realm = f'Bearer realm="http://{server.host}/token",service="test"'
                    return self._send(
                        401,
                        b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                        extra={"Www-Authenticate": realm},
                    )
                path = self.path.split("?", 1)[0]
                if not path.startswith("/v2/"):
                    return self._send(404)
                rest = path[len("/v2/") :]
                if "/referrers/" in rest:
                    repo, digest = rest.split("/referrers/")
                    if not server.referrers_api:
                        return self._send(404, b'{"errors":[{"code":"NOT_FOUND"}]}')
                    listed = server.referrers.get((repo, digest), [])
                    body = json.dumps(
                        {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": listed}
                    ).encode()
                    return self._send(200, body, INDEX_TYPE)
                if "/manifests/" in rest:
                    repo, reference = rest.split("/manifests/")
                    key = reference if reference.startswith("sha256:") else f"{repo}:{reference}"
                    if key not in server.manifests:
                        return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                    content, media_type = server.manifests[key]
                    return self._send(200, content, media_type)
                if "/blobs/" in rest:
                    _, digest = rest.split("/blobs/")
                    if digest not in server.blobs:
                        return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                    return self._send(200, server.blobs[digest], "application/octet-stream")
                return self._send(404)

        return Handler
