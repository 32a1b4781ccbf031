"""Fetch an image's Sigstore bundles from its registry, over the OCI 1.1 distribution API."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import oras.provider
import requests

from secureml.core.errors import NetworkError
from secureml.core.image_ref import DOCKER_HUB, ImageRef
from secureml.supplychain.verifier import SignatureError

SIGSTORE_BUNDLE_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_TIMEOUT_S = 20.0
_MAX_BUNDLES = 16  # a referrer list can be long; more bundles than this per image is not plausible


@dataclass(frozen=True, slots=True)
class FetchedBundle:
    content: bytes
    source: str  # e.g. "ghcr.io/acme/train@sha256:<referrer manifest> (referrers API)"


class _FastRegistry(oras.provider.Registry):  # type: ignore[misc]  # oras has no type information
    """oras' Registry with single-try requests and a timeout (docs/supply-chain.md)."""

    def do_request(
        self,
        url: str,
        method: str = "GET",
        data: dict[str, Any] | bytes | None = None,
        headers: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> requests.Response:
        headers = dict(headers or {})
        if getattr(self.auth, "token", None):
            headers.update(self.auth.get_auth_header())
        send = dict(
            data=data, json=json, stream=stream, verify=self._tls_verify, timeout=_TIMEOUT_S
        )
        response: requests.Response = self.session.request(method, url, headers=headers, **send)
        if response.status_code in (401, 403):
            headers, changed = self.auth.authenticate_request(response, headers)
            if changed:
                response = self.session.request(method, url, headers=headers, **send)
        return response


def _api_host(registry: str) -> str:
    return "registry-1.docker.io" if registry == DOCKER_HUB else registry


def _is_local(registry: str) -> bool:
    return registry.rsplit(":", 1)[0] in _LOCAL_HOSTS or registry.startswith("[::1]")


def fetch_bundles(ref: ImageRef) -> list[FetchedBundle]:
    """Every Sigstore bundle the registry holds for `ref` (pinned by digest).

    Raise SignatureError('missing') when it holds none, NetworkError when the registry does not answer.
    """
    if ref.digest is None:
        raise SignatureError(
            "missing",
            f"image {ref} is not pinned by digest",
            why="bundles are looked up by digest",
            fix="reference the image as REPOSITORY@sha256:<digest>",
        )
    host = _api_host(ref.registry)
    local = _is_local(ref.registry)
    client = _FastRegistry(hostname=host, insecure=local)
    base = f"{'http' if local else 'https'}://{host}/v2/{ref.repository}"
    container = client.get_container(f"{host}/{ref.repository}@{ref.digest}")
    client.auth.load_configs(container)
    where = f"{ref.name}@{ref.digest}"
    try:
        descriptors, how = _referrer_descriptors(client, base, ref)
        bundles: list[FetchedBundle] = []
        for descriptor in descriptors[:_MAX_BUNDLES]:
            bundles.append(_bundle_from_manifest(client, base, ref, descriptor, how))
    except requests.RequestException as err:
        raise NetworkError(
            f"cannot fetch Sigstore bundles for {where}",
            why=f"registry {host} did not answer: {type(err).__name__}: {err}".splitlines()[0],
            fix="check network access and credentials (docker login), or pass the bundle with --bundles",
        ) from None
    if not bundles:
        raise SignatureError(
            "missing",
            f"no Sigstore bundle is attached to {where}",
            why=f"the registry lists no referrer with a Sigstore bundle artifact type ({how})",
            fix="sign the image with `cosign sign --new-bundle-format`, or pass the bundle with --bundles",
        )
    return bundles


def _referrer_descriptors(
    client: _FastRegistry, base: str, ref: ImageRef
) -> tuple[list[dict[str, Any]], str]:
    response = client.do_request(f"{base}/referrers/{ref.digest}", headers={"Accept": OCI_INDEX})
    how = "referrers API"
    if response.status_code == 404:
        tag = f"sha256-{ref.digest_hex}"
        response = client.do_request(f"{base}/manifests/{tag}", headers={"Accept": OCI_INDEX})
        how = f"fallback tag {tag}"
        if response.status_code == 404:
            return [], how
    _expect_ok(response, how)
    try:
        index = response.json()
    except ValueError:
        raise _protocol_error(ref, how, "the referrer index is not JSON") from None
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list):
        raise _protocol_error(ref, how, "the referrer index has no `manifests` list")
    wanted = [
        m
        for m in manifests
        if isinstance(m, dict)
        and m.get("artifactType") in SIGSTORE_BUNDLE_TYPES
        and isinstance(m.get("digest"), str)
    ]
    return wanted, how


def _bundle_from_manifest(
    client: _FastRegistry, base: str, ref: ImageRef, descriptor: dict[str, Any], how: str
) -> FetchedBundle:
    digest = descriptor["digest"]
    response = client.do_request(f"{base}/manifests/{digest}", headers={"Accept": OCI_MANIFEST})
    _expect_ok(response, how)
    _check_digest(response.content, digest, ref, how, "referrer manifest")
    try:
        manifest = json.loads(response.content)
        layers = [
            layer for layer in manifest["layers"] if layer.get("mediaType") in SIGSTORE_BUNDLE_TYPES
        ]
        layer_digest = layers[0]["digest"]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise _protocol_error(
            ref, how, f"referrer manifest {digest} has no Sigstore bundle layer"
        ) from None
    blob = client.get_blob(
        client.get_container(f"{_api_host(ref.registry)}/{ref.repository}"), layer_digest
    )
    _expect_ok(blob, how)
    _check_digest(blob.content, layer_digest, ref, how, "bundle blob")
    return FetchedBundle(content=blob.content, source=f"{ref.name}@{digest} ({how})")


def _expect_ok(response: requests.Response, how: str) -> None:
    if response.status_code != 200:
        raise requests.HTTPError(
            f"{response.request.method} {response.url} -> HTTP {response.status_code} ({how})"
        )


def _check_digest(content: bytes, digest: str, ref: ImageRef, how: str, what: str) -> None:
    if digest != "sha256:" + hashlib.sha256(content).hexdigest():
        raise _protocol_error(ref, how, f"the {what} does not match its digest {digest}")


def _protocol_error(ref: ImageRef, how: str, why: str) -> SignatureError:
    return SignatureError(
        "missing",
        f"cannot read the Sigstore bundles attached to {ref.name}@{ref.digest}",
        why=f"{why} ({how})",
        fix="check the registry's OCI 1.1 support; pass the bundle with --bundles meanwhile",
    )
