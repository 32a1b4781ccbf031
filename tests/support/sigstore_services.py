"""The tests' private Sigstore (private_sigstore.py) behind HTTP, as a CI job meets it when it signs keylessly.

One local server answers three services:

- `GET /token`: GitHub Actions' OIDC token endpoint (`ACTIONS_ID_TOKEN_REQUEST_URL`): a JWT for
  the audience asked, issuer `https://token.actions.githubusercontent.com`, `sub` the workflow;
- `POST /api/v2/signingCert`: Fulcio: the CSR's public key certified for that workflow (the token
  is not checked: this is a test instance);
- `POST /api/v1/log/entries`: Rekor v1: the proposed `dsse` entry logged (a one-leaf tree).

`client_trust_config()` is the `ClientTrustConfig` naming them, for `--attest-trust-config`.
sigstore-python's unchanged signer talks to it; nothing in secureml knows it exists.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.private_sigstore import PrivateSigstore

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


class SigstoreServices:
    def __init__(self, pki: PrivateSigstore, workflow: str) -> None:
        self.pki, self.workflow = pki, workflow
        self.requests: list[str] = []
        services = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _reply(self, document: dict[str, Any], status: int = 200) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                services.requests.append(f"GET {self.path.split('?')[0]}")
                self._reply({"value": services.token()})

            def do_POST(self) -> None:
                services.requests.append(f"POST {self.path}")
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/api/v2/signingCert"):
                    self._reply(services.signing_cert(request))
                elif self.path.endswith("/api/v1/log/entries"):
                    self._reply(services.log_entry(request), 201)
                else:
                    self._reply({"message": "not found"}, 404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SigstoreServices:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def token(self) -> str:
        now = int(time.time())
        claims = {"iss": GITHUB_ISSUER, "sub": self.workflow, "aud": "sigstore"}
        key = "secureml-test-oidc-signing-key-32b"
        return jwt.encode({**claims, "iat": now, "nbf": now, "exp": now + 300}, key, "HS256")

    def signing_cert(self, request: dict[str, Any]) -> dict[str, Any]:
        csr = x509.load_pem_x509_csr(base64.b64decode(request["certificateSigningRequest"]))
        public_key = csr.public_key()
        assert isinstance(public_key, ec.EllipticCurvePublicKey)
        cert = self.pki.certify(public_key, self.workflow, GITHUB_ISSUER)
        chain = [
            c.public_bytes(serialization.Encoding.PEM).decode() for c in (cert, self.pki.ca_cert)
        ]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": chain}}}

    def log_entry(self, request: dict[str, Any]) -> dict[str, Any]:
        assert request["kind"] == "dsse", request["kind"]
        proposed = request["spec"]["proposedContent"]
        envelope = json.loads(proposed["envelope"])
        payload = base64.b64decode(envelope["payload"])
        body = {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(proposed["envelope"].encode()).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": [
                    {
                        "signature": envelope["signatures"][0]["sig"],
                        "verifier": proposed["verifiers"][0],
                    }
                ],
            },
        }
        entry = self.pki._log_entry("dsse", body)
        proof = entry["inclusionProof"]
        logged = {
            "body": entry["canonicalizedBody"],
            "integratedTime": int(entry["integratedTime"]),
            "logID": base64.b64decode(entry["logId"]["keyId"]).hex(),
            "logIndex": int(entry["logIndex"]),
            "verification": {
                "signedEntryTimestamp": entry["inclusionPromise"]["signedEntryTimestamp"],
                "inclusionProof": {
                    "logIndex": int(proof["logIndex"]),
                    "rootHash": base64.b64decode(proof["rootHash"]).hex(),
                    "treeSize": int(proof["treeSize"]),
                    "hashes": [],
                    "checkpoint": proof["checkpoint"]["envelope"],
                },
            },
        }
        return {hashlib.sha256(base64.b64decode(entry["canonicalizedBody"])).hexdigest(): logged}

    def client_trust_config(self) -> dict[str, Any]:
        start = {"start": "2020-01-01T00:00:00Z"}

        def service(url: str) -> dict[str, Any]:
            return {
                "url": url,
                "majorApiVersion": 1,
                "validFor": start,
                "operator": "secureml.test",
            }

        return {
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": self.pki.trusted_root(),
            "signingConfig": {
                "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                "caUrls": [service(self.url)],
                "oidcUrls": [service(self.url + "/auth")],
                "rekorTlogUrls": [service(self.url)],
                "tsaUrls": [],
                "rekorTlogConfig": {"selector": "ANY"},
                "tsaConfig": {"selector": "ANY"},
            },
        }
