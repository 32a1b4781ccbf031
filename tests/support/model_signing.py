"""Sign a small model folder the way model-signing 1.x does: with a key (model-signing's own
signer), or keyless with the tests' private Sigstore (`tests/support/private_sigstore.py`).

For the Sigstore signature, model-signing's key signer first writes the statement (its own
manifest and in-toto payload, byte for byte what its Sigstore signer would sign), and the private
Sigstore then signs that statement as a DSSE bundle with a Fulcio-style certificate and a Rekor
entry: model-signing's Sigstore signer itself needs a live Fulcio and Rekor.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.private_sigstore import PrivateSigstore

SIGNATURE = "model.sig"
ISSUER = "https://token.actions.githubusercontent.com"
SIGNER = "https://github.com/acme/models/.github/workflows/release.yml@refs/heads/main"
TRUSTED_REGEXP = r"^https://github\.com/acme/models/"


def make_model(folder: Path) -> Path:
    """A small model folder: weights, a nested config, a tokenizer."""
    (folder / "config").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (folder / "config" / "model.json").write_text('{"layers": 2}\n')
    (folder / "tokenizer.txt").write_text("a b c\n")
    return folder


def new_key(folder: Path, name: str = "signer") -> tuple[Path, bytes]:
    """A P-256 private key file and its public key PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = folder / f"{name}.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return path, public


def sign_with_key(model: Path, private_key: Path, *, shards: bool = False) -> Path:
    """model-signing's key signing of `model`, the signature at model/model.sig (not hashed)."""
    import model_signing

    hashing = model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    if shards:
        hashing.use_shard_serialization(shard_size=4096)
    signature = model / SIGNATURE
    signing = model_signing.signing.Config().use_elliptic_key_signer(private_key=private_key)
    signing.set_hashing_config(hashing).sign(model, signature)
    return signature


def sign_with_sigstore(
    model: Path, pki: PrivateSigstore, scratch: Path, *, subject: str = SIGNER
) -> Path:
    """A keyless signature of `model` by `subject` from the private Sigstore."""
    key, _ = new_key(scratch, "statement")
    signature = sign_with_key(model, key)
    envelope = json.loads(signature.read_text())["dsseEnvelope"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    signature.write_bytes(pki.sign_dsse(statement, subject=subject, issuer=ISSUER))
    return signature
