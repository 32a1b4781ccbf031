"""The launcher's `verify-inputs` stage: each input the step must verify is signed by a trusted
signer and unchanged, before the step's code runs.

Which inputs: `SECUREML_VERIFY_INPUTS` (the pod's `secureml.dev/verify-inputs` annotation where
podinfo is mounted). Whom to trust: `SECUREML_MODEL_TRUST`, admission-pinned to the profile's
`spec.models`. Where each input is: KFP's executor input, which KFP's launcher passes to a Python
component as `--executor_input <JSON>`; the local path of an artifact follows the KFP SDK's own
rule (`kfp.dsl.types.artifact_types.Artifact.path`): `gs://`, `s3://`, `minio://` under `/gcs/`,
`/s3/`, `/minio/`; `oci://` under `/oci/` with `/` turned into `_` (a `system.Model` at `/models`
inside: the modelcar image's model folder); an artifact in the pipeline workspace under
`/kfp-workspace/.artifacts/`; any other URI (a local run's) is the path itself. A failure is a
`SignatureError`, stage failure and exit 78 (`ExitCode.VERIFY_INPUTS`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.supplychain.verify_inputs import VerifiedInput

EXECUTOR_INPUT_FLAG = "--executor_input"
WORKSPACE_MOUNT_PATH = "/kfp-workspace"  # kfp.dsl.constants.WORKSPACE_MOUNT_PATH
_MOUNT_PREFIXES = (("gs://", "/gcs/"), ("minio://", "/minio/"), ("s3://", "/s3/"))
OCI_PREFIX, OCI_MOUNT = "oci://", "/oci/"
MODEL_SCHEMA = "system.Model"


class InputVerificationError(SecuremlError):
    """An input to verify cannot be found or its trust cannot be read (the stage fails: 78)."""


def executor_input(command: Sequence[str]) -> dict[str, Any]:
    """The KFP executor input in the step's argv (`--executor_input <JSON>`, exactly once)."""
    positions = [i for i, arg in enumerate(command) if arg == EXECUTOR_INPUT_FLAG]
    if len(positions) != 1 or positions[0] + 1 >= len(command):
        raise InputVerificationError(
            f"the step's command carries {len(positions)} {EXECUTOR_INPUT_FLAG} arguments, not one",
            why="the launcher finds each input's path in KFP's executor input, which KFP passes to "
            "a Python component",
            fix="verify inputs only in Python components compiled by `secureml compile`",
        )
    try:
        document = json.loads(command[positions[0] + 1])
    except ValueError as err:
        raise InputVerificationError(
            f"the {EXECUTOR_INPUT_FLAG} argument is not JSON", why=str(err)
        ) from None
    if not isinstance(document, dict):
        raise InputVerificationError(f"the {EXECUTOR_INPUT_FLAG} argument is not a JSON object")
    return document


def local_path(artifact: dict[str, Any]) -> Path:
    """Where KFP puts an input artifact in the container (the KFP SDK's `Artifact.path`)."""
    uri = str(artifact.get("uri") or "")
    path = uri
    for remote, mount in _MOUNT_PREFIXES:
        if uri.startswith(remote):
            path = mount + uri[len(remote) :]
    if uri.startswith(OCI_PREFIX):
        path = OCI_MOUNT + uri[len(OCI_PREFIX) :].replace("/", "_")
    metadata = artifact.get("metadata")
    if isinstance(metadata, dict) and metadata.get("_kfp_workspace") is True:
        path = os.path.join(WORKSPACE_MOUNT_PATH, ".artifacts", path.lstrip("/"))
    schema = (artifact.get("type") or {}).get("schemaTitle")
    if uri.startswith(OCI_PREFIX) and schema == MODEL_SCHEMA:
        path += "/models"
    return Path(path)


def input_artifact(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The one artifact of input `name` in the executor input."""
    artifacts = ((document.get("inputs") or {}).get("artifacts") or {}).get(name) or {}
    found = artifacts.get("artifacts") if isinstance(artifacts, dict) else None
    if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
        raise InputVerificationError(
            f"input {name!r} is not one artifact in KFP's executor input",
            why="the step verifies this input, so KFP must hand it exactly one artifact",
            fix="connect the input to an artifact (e.g. another step's Output[Model])",
        )
    return found[0]


def verify_step_inputs(
    inputs: Sequence[VerifiedInput],
    trust_json: str,
    command: Sequence[str],
    entries: list[dict[str, Any]],
) -> Path:
    """Verify each input, appending its audit entry to `entries` (also the failed one's, before
    the error propagates); return the read-only JSON file of the entries, for the step."""
    from secureml.supplychain.models import trust_from_json, verify_model

    if not trust_json:
        raise InputVerificationError(
            f"{contract.ENV_MODEL_TRUST} is empty: no trusted model signer to verify "
            + ", ".join(i.name for i in inputs)
            + " against",
            why="a signature proves nothing unless its signer is one the tenant trusts",
            fix="list the signers under the profile's spec.models and recompile",
            where=contract.ENV_MODEL_TRUST,
        )
    private = Path(tempfile.mkdtemp(prefix="secureml-inputs-"))
    trust = trust_from_json(trust_json, private)
    document = executor_input(command)
    for item in inputs:
        artifact = input_artifact(document, item.name)
        path = local_path(artifact)
        entry: dict[str, Any] = {"input": item.name, "path": str(path), "uri": artifact.get("uri")}
        try:
            verified = verify_model(path, trust, signature=item.signature, name=item.name)
        except SecuremlError as err:
            entries.append({**entry, "verified": False, "error": err.what})
            raise
        entries.append({**verified.to_dict(), **entry})
    result = private / "verified-inputs.json"
    result.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    result.chmod(0o444)
    return result
