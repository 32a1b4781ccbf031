"""Verify an OpenSSF model-signing signature over a model directory, offline."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secureml.core.errors import InputError, SecuremlError
from secureml.supplychain.identity import TrustedIdentity
from secureml.supplychain.model_trust import PUBLIC_ROOTS
from secureml.supplychain.verifier import (
    IN_TOTO_PAYLOAD_TYPE,
    KeylessAdvice,
    SignatureError,
    _first_line,
    _parse_bundle_json,
    verify_keyless_dsse,
)
from secureml.supplychain.verify_inputs import DEFAULT_SIGNATURE

MODEL_SIGNING_PREDICATE = "https://model_signing/signature/v1.0"
IN_TOTO_STATEMENT_V1 = "https://in-toto.io/Statement/v1"
HASH_TYPES = ("sha256", "blake2", "blake3")


@dataclass(frozen=True, slots=True)
class ModelTrust:
    """Who may sign a model for this tenant: Sigstore identities under a trusted root, and keys."""

    signers: tuple[TrustedIdentity, ...] = ()
    keys: tuple[bytes, ...] = ()  # PEM public keys
    trusted_root: str = "production"  # production | staging | path of a trusted_root.json

    @property
    def empty(self) -> bool:
        return not self.signers and not self.keys

    def describe(self) -> str:
        who = [str(s) for s in self.signers] + [f"key {_pem_fingerprint(k)}" for k in self.keys]
        return "; ".join(who) or "(nobody)"


@dataclass(frozen=True, slots=True)
class ModelVerification:
    """A model folder that matched its signature: what it is and who signed it."""

    name: str  # the input's name (or the folder's)
    path: str
    digest: str  # sha256:<hex>, the statement's subject: over every file's digest
    model_name: str  # the subject's name as signed (the folder name at signing time)
    method: str  # sigstore | key
    signer: str  # the certificate subject, or the key's fingerprint
    issuer: str | None  # the OIDC issuer (sigstore only)
    files: int
    hash_type: str
    seconds: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.name,
            "path": self.path,
            "verified": True,
            "digest": self.digest,
            "model_name": self.model_name,
            "method": self.method,
            "signer": self.signer,
            "issuer": self.issuer,
            "files": self.files,
            "hash_type": self.hash_type,
            "seconds": self.seconds,
        }


def verify_model(
    model_dir: Path,
    trust: ModelTrust,
    *,
    signature: str = DEFAULT_SIGNATURE,
    name: str = "",
) -> ModelVerification:
    """Verify the model folder `model_dir` against its signature file `signature` (relative)."""
    started = time.perf_counter()
    label = name or model_dir.name
    subject = f"model {label!r} at {model_dir}"
    root = _model_folder(model_dir, subject)
    sig_path = root / signature
    if not sig_path.is_file():
        raise SignatureError(
            "missing",
            f"{subject}: no signature {signature!r} in the model folder",
            why="a model is trusted only with an OpenSSF model-signing signature by a trusted signer",
            fix=f"sign the model folder with model-signing 1.x and put the signature at {signature} "
            "inside it (`model_signing sign ... --signature MODEL/model.sig`)",
            where=str(sig_path),
        )
    bundle = sig_path.read_bytes()
    document = _parse_bundle_json(bundle, str(sig_path))
    if "dsseEnvelope" not in document:
        raise SignatureError(
            "invalid",
            f"{subject}: {signature} is not a model-signing signature",
            why="a model-signing signature is a Sigstore bundle with a DSSE envelope; this one "
            "signs a message",
            fix="sign the model folder with model-signing 1.x",
            where=str(sig_path),
        )
    material = document.get("verificationMaterial")
    keyed = isinstance(material, dict) and "publicKey" in material
    if keyed:
        payload_type, payload, signer, issuer = _verify_with_keys(
            document, trust, subject, sig_path
        )
    else:
        payload_type, payload, signer, issuer = _verify_sigstore(bundle, trust, subject, sig_path)
    statement = _statement(payload_type, payload, subject, str(sig_path))
    expected, serialization, model_name, digest = _signed_manifest(statement, subject, sig_path)
    actual = _hash_folder(root, serialization, signature, subject)
    _compare(expected, actual, subject, str(sig_path))
    return ModelVerification(
        name=label,
        path=str(model_dir),
        digest=f"sha256:{digest}",
        model_name=model_name,
        method="key" if keyed else "sigstore",
        signer=signer,
        issuer=issuer,
        files=len({key.split(":")[0] for key in actual}),
        hash_type=str(serialization["hash_type"]),
        seconds=round(time.perf_counter() - started, 6),
    )


def _model_folder(model_dir: Path, subject: str) -> Path:
    """The model folder, the link followed when `model_dir` is one; a missing path or a file is
    `missing`.

    KFP's `oci://` model input is a link to `/proc/<modelcar pid>/root/models`, a path the kernel
    resolves into the modelcar container's own file system; `os.path.realpath` would rewrite it
    textually (`/models`, this container's). So the link's target is taken as written, and the
    kernel follows the magic link when the files are opened.
    """
    path = model_dir
    for _ in range(40):  # the kernel's own limit on links in a path
        if not path.is_symlink():
            break
        target = Path(os.readlink(path))
        path = target if target.is_absolute() else path.parent / target
    if not path.is_dir() or path.is_symlink():
        raise SignatureError(
            "missing",
            f"{subject}: no model folder there",
            why="the path does not exist or is not a folder; a signed model is a folder holding "
            "its files and its signature",
            fix="write the model as a folder (e.g. os.makedirs(model.path)) and sign that folder",
            where=str(model_dir),
        )
    return path


def _verify_sigstore(
    bundle: bytes, trust: ModelTrust, subject: str, sig_path: Path
) -> tuple[str, bytes, str, str]:
    from secureml.supplychain.trust import verifier_for

    if not trust.signers:
        raise SignatureError(
            "untrusted",
            f"{subject}: signed with a certificate, but no model signer identities are trusted",
            why=f"the profile trusts only: {trust.describe()}",
            fix="list the signer under spec.models.signers (issuer and subject or subjectRegExp)",
            where=str(sig_path),
        )
    return verify_keyless_dsse(
        bundle,
        trust.signers,
        verifier_for(trust.trusted_root),
        subject=subject,
        whose="",
        where=str(sig_path),
        advice=KeylessAdvice(
            unusable="use the signature model-signing wrote for this model",
            untrusted="sign with a trusted identity, or (platform team) add the signer to "
            "spec.models.signers",
            invalid="use the signature made for this model with the trusted Sigstore instance",
        ),
    )


def _verify_with_keys(
    document: dict[str, Any], trust: ModelTrust, subject: str, sig_path: Path
) -> tuple[str, bytes, str, None]:
    from secureml.supplychain.dsse_key import verify_envelope

    if not trust.keys:
        raise SignatureError(
            "untrusted",
            f"{subject}: signed with a key, but no model signing keys are trusted",
            why=f"the profile trusts only: {trust.describe()}",
            fix="add the public key (PEM) under spec.models.keys, or sign with a trusted identity",
            where=str(sig_path),
        )
    failures: list[str] = []
    for pem in trust.keys:
        try:
            payload_type, payload, fingerprint = verify_envelope(
                document, pem, key_source="spec.models.keys", subject=subject, where=str(sig_path)
            )
        except SignatureError as err:
            failures.append(err.why or err.what)
            continue
        return payload_type, payload, fingerprint, None
    raise SignatureError(
        "untrusted",
        f"{subject}: signed by a key that is not trusted",
        why="no trusted key verifies the signature: " + "; ".join(failures),
        fix="sign with a trusted key, or (platform team) add its public key to spec.models.keys",
        where=str(sig_path),
    )


def _statement(payload_type: str, payload: bytes, subject: str, where: str) -> dict[str, Any]:
    def fail(why: str) -> SignatureError:
        return SignatureError(
            "invalid",
            f"{subject}: the signed statement is not a model-signing 1.x signature",
            why=why,
            fix="sign the model with model-signing 1.x (predicate " + MODEL_SIGNING_PREDICATE + ")",
            where=where,
        )

    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise fail(f"DSSE payload type is {payload_type!r}, expected {IN_TOTO_PAYLOAD_TYPE!r}")
    try:
        statement = json.loads(payload)
    except ValueError as err:
        raise fail(f"the statement is not JSON: {_first_line(err)}") from None
    if not isinstance(statement, dict) or statement.get("_type") != IN_TOTO_STATEMENT_V1:
        raise fail("the payload is not an in-toto v1 statement")
    if statement.get("predicateType") != MODEL_SIGNING_PREDICATE:
        raise fail(f"predicate type {statement.get('predicateType')!r}")
    return statement


def _signed_manifest(
    statement: dict[str, Any], subject: str, sig_path: Path
) -> tuple[dict[str, tuple[str, str]], dict[str, Any], str, str]:
    """(resource name -> (algorithm, hex digest), serialization, model name, subject digest)."""

    def fail(why: str) -> SignatureError:
        return SignatureError(
            "invalid",
            f"{subject}: the signed manifest is malformed",
            why=why,
            fix="re-sign the model with model-signing 1.x",
            where=str(sig_path),
        )

    try:
        (signed_subject,) = statement["subject"]
        model_name = str(signed_subject.get("name", ""))
        digest = str(signed_subject["digest"]["sha256"])
        predicate = statement["predicate"]
        serialization = dict(predicate["serialization"])
        resources = list(predicate["resources"])
        expected: dict[str, tuple[str, str]] = {}
        combined = hashlib.sha256()
        for resource in resources:
            key, algorithm, value = (
                str(resource["name"]),
                str(resource["algorithm"]),
                str(resource["digest"]),
            )
            if key in expected:
                raise fail(f"resource {key!r} is listed twice")
            expected[key] = (algorithm, value)
            combined.update(bytes.fromhex(value))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise fail(f"missing or wrong field: {_first_line(err)}") from None
    if combined.hexdigest() != digest:
        raise fail(
            f"the subject digest sha256:{digest} is not the digest of the listed resources "
            f"(sha256:{combined.hexdigest()})"
        )
    method, hash_type = serialization.get("method"), serialization.get("hash_type")
    if method not in ("files", "shards") or hash_type not in HASH_TYPES:
        raise fail(
            f"serialization {method!r} with hash {hash_type!r} is not one model-signing 1.x writes"
        )
    shard_size = serialization.get("shard_size")
    if method == "shards" and not (  # a protobuf Struct number: 1000000000.0
        isinstance(shard_size, (int, float)) and shard_size >= 1 and float(shard_size).is_integer()
    ):
        raise fail(f"shard serialization with shard_size {shard_size!r}")
    ignored = serialization.get("ignore_paths", [])
    if not isinstance(ignored, list) or not all(isinstance(p, str) for p in ignored):
        raise fail("ignore_paths is not a list of paths")
    return expected, serialization, model_name, digest


def _hash_folder(
    root: Path, serialization: Mapping[str, Any], signature: str, subject: str
) -> dict[str, tuple[str, str]]:
    """Hash the folder the way the signed serialization says: resource name -> (algorithm, hex)."""
    from model_signing import hashing

    # model-signing is typed, but its Config.__init__ has no annotations
    config = hashing.Config().set_ignored_paths(  # type: ignore[no-untyped-call]
        paths=[*serialization.get("ignore_paths", []), signature], ignore_git_paths=False
    )
    allow_symlinks = serialization.get("allow_symlinks") is True
    if serialization["method"] == "shards":
        config.use_shard_serialization(
            hashing_algorithm=serialization["hash_type"],
            shard_size=int(serialization["shard_size"]),
            allow_symlinks=allow_symlinks,
        )
    else:
        config.use_file_serialization(
            hashing_algorithm=serialization["hash_type"], allow_symlinks=allow_symlinks
        )
    try:
        manifest = config.hash(root)
    except (ValueError, OSError) as err:
        raise SignatureError(
            "invalid",
            f"{subject}: the model folder cannot be hashed as it was signed",
            why=_first_line(err),
            fix="remove symbolic links and unreadable files from the model folder, or re-sign it",
            where=str(root),
        ) from None
    return {
        str(rd.identifier): (str(rd.digest.algorithm), str(rd.digest.digest_hex))
        for rd in manifest.resource_descriptors()
    }


def _compare(
    expected: Mapping[str, tuple[str, str]],
    actual: Mapping[str, tuple[str, str]],
    subject: str,
    where: str,
) -> None:
    changed = sorted(k for k in expected.keys() & actual.keys() if expected[k] != actual[k])
    extra = sorted(actual.keys() - expected.keys())
    missing = sorted(expected.keys() - actual.keys())
    if not (changed or extra or missing):
        return
    parts = [
        f"{label}: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}"
        for label, names in (
            ("modified", changed),
            ("not signed (extra)", extra),
            ("missing", missing),
        )
        if names
    ]
    raise SignatureError(
        "invalid",
        f"{subject} does not match its signature",
        why="; ".join(parts),
        fix="use the model exactly as it was signed, or re-sign it after a deliberate change",
        where=where,
    )


def _pem_fingerprint(pem: bytes) -> str:
    from secureml.supplychain.managed_key import fingerprint, load_public_key

    try:
        return fingerprint(load_public_key(pem, "key"))
    except SecuremlError:
        return "(unreadable key)"


# --- the trust as the launcher receives it (secureml.supplychain.model_trust writes it) -------


def trust_from_json(text: str, root_dir: Path) -> ModelTrust:
    """Read the trust the compiler wrote; an inline trusted root is written under `root_dir`."""

    def fail(why: str) -> InputError:
        return InputError(
            "the model trust is malformed",
            why=why,
            fix="recompile the pipeline with `secureml compile`",
        )

    try:
        document = json.loads(text)
        signers = tuple(
            TrustedIdentity(
                issuer=str(s["issuer"]),
                subject=s.get("subject"),
                subject_regexp=s.get("subjectRegExp"),
            )
            for s in document["signers"]
        )
        keys = tuple(str(k).encode("ascii") for k in document["keys"])
        root = document["trustedRoot"]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise fail(_first_line(err)) from None
    if isinstance(root, dict):
        root_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = root_dir / "model_trusted_root.json"
        path.write_text(json.dumps(root), encoding="utf-8")
        root = str(path)
    elif root not in PUBLIC_ROOTS:
        raise fail(f"trustedRoot must be production, staging or a trusted root, got {root!r}")
    return ModelTrust(signers=signers, keys=keys, trusted_root=str(root))


__all__ = [
    "DEFAULT_SIGNATURE",
    "MODEL_SIGNING_PREDICATE",
    "ModelTrust",
    "ModelVerification",
    "trust_from_json",
    "verify_model",
]
