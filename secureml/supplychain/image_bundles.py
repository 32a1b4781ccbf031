"""One image's signature from its candidate bundles: where they come from, which one decides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.verifier import SignatureError, SignatureVerifier, VerifiedSignature

Candidate = tuple[bytes, str]  # the bundle's bytes and where it came from
_TELLING = {"untrusted": 0, "invalid": 1, "missing": 2}


def bundle_filename(digest_hex: str) -> str:
    """The file name a bundle for image digest `sha256:<digest_hex>` has in a `--bundles` folder."""
    return f"sha256-{digest_hex}.sigstore.json"


def read_bundle_file(path: Path) -> Candidate:
    """A bundle given by path (`--bundle FILE`); an unreadable file is unusable input."""
    try:
        return path.read_bytes(), str(path)
    except OSError as err:
        raise InputError(
            f"cannot read bundle {path}", why=err.strerror or str(err), fix="check the path"
        ) from None


def candidate_bundles(ref: ImageRef, bundles_dir: Path | None, fetch: bool) -> list[Candidate]:
    """`DIR/sha256-<hex>.sigstore.json` when present, else (with `fetch`) the registry's bundles."""
    if ref.digest_hex is None:
        raise SignatureError(
            "missing",
            f"image {ref} is not pinned by digest",
            why="signatures are over a manifest digest; a tag can be moved to other content",
            fix="reference the image as REPOSITORY@sha256:<digest>",
        )
    looked: list[str] = []
    if bundles_dir is not None:
        path = Path(bundles_dir) / bundle_filename(ref.digest_hex)
        if path.is_file():
            return [(path.read_bytes(), str(path))]
        looked.append(str(path))
    if fetch:
        from secureml.supplychain.registry import fetch_bundles

        return [(bundle.content, bundle.source) for bundle in fetch_bundles(ref)]
    raise SignatureError(
        "missing",
        f"no Sigstore bundle for image {ref.by_digest()}",
        why=f"looked for {', '.join(looked)}"
        if looked
        else "no --bundles folder was given and fetching is off",
        fix=f"put the bundle at DIR/{bundle_filename(ref.digest_hex)} and pass --bundles DIR, "
        "or pass --fetch-bundles to read it from the registry",
    )


@dataclass(frozen=True, slots=True)
class BundleOutcome:
    """What the candidates decided: `signed` by whom, or the reported `failure`; and its bundle."""

    source: str | None
    signed: VerifiedSignature | None = None
    failure: SignatureError | None = None


def verify_with_bundles(
    ref: ImageRef,
    candidates: Sequence[Candidate],
    verifier: SignatureVerifier,
    identities: Sequence[TrustedIdentity],
) -> BundleOutcome:
    """The first candidate that verifies; else the most telling failure (docs/supply-chain.md)."""
    failures: list[tuple[SignatureError, str]] = []
    for content, source in candidates:
        try:
            signed = verifier.verify_image(ref, content, identities, bundle_source=source)
        except SignatureError as err:
            failures.append((err, source))
            continue
        return BundleOutcome(source, signed=signed)
    if not failures:
        return BundleOutcome(
            None,
            failure=SignatureError("missing", f"no Sigstore bundle for image {ref.by_digest()}"),
        )
    failure, source = min(failures, key=lambda item: _TELLING[item[0].kind])
    return BundleOutcome(source, failure=failure)
