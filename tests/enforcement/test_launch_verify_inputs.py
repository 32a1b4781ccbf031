"""The launcher's verify-inputs stage end to end: a real step, run through
`python -m secureml.enforcement.launch`, whose input model is signed with model-signing 1.x.

The executor input is the one KFP's launcher hands a Python component (`--executor_input`); the
trust is what the compiler writes from the profile's `spec.models` (`profile_trust_json`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.launch import ExitCode
from secureml.supplychain.model_trust import profile_trust_json
from tests.support.model_signing import (
    ISSUER,
    SIGNER,
    TRUSTED_REGEXP,
    make_model,
    new_key,
    sign_with_key,
    sign_with_sigstore,
)
from tests.support.private_sigstore import PrivateSigstore
from tests.support.profiles import make_profile

from .conftest import Launch

PY = sys.executable
# The step: prove it ran, and show what the launcher handed it.
STEP = (
    "import os, sys, pathlib; pathlib.Path(sys.argv[-1]).write_text("
    f"pathlib.Path(os.environ[{contract.ENV_VERIFIED_INPUTS!r}]).read_text())"
)


def _env(trust: str, inputs: str = '[{"name":"model","signature":"model.sig"}]') -> dict[str, str]:
    return {
        contract.ENV_TENANT: "team-a",
        contract.ENV_STEP: "train",
        contract.ENV_ISOLATION: "none",
        contract.ENV_VERIFY_INPUTS: inputs,
        contract.ENV_MODEL_TRUST: trust,
    }


def _command(model: Path, marker: Path) -> list[str]:
    executor_input = {
        "inputs": {
            "artifacts": {
                "model": {
                    "artifacts": [
                        {
                            "name": "model",
                            "type": {"schemaTitle": "system.Model"},
                            "uri": str(model),
                        }
                    ]
                }
            }
        },
        "outputs": {"outputFile": "/tmp/unused"},
    }
    return [PY, "-c", STEP, "--executor_input", json.dumps(executor_input), str(marker)]


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, str]:
    """A model signed with a key, and the trust of a profile that lists that key."""
    model = make_model(tmp_path / "model")
    private, public = new_key(tmp_path)
    sign_with_key(model, private)
    profile = make_profile(models={"keys": [public.decode()]})
    return model, profile_trust_json(profile)


def test_a_signed_model_is_verified_before_the_step_runs(
    launch: Launch, signed: tuple[Path, str], tmp_path: Path
) -> None:
    model, trust = signed
    marker = tmp_path / "ran"
    result = launch(_command(model, marker), _env(trust))

    assert result.returncode == 0, result.stderr
    assert result.stage("verify-inputs")["status"] == "ok"
    (entry,) = result.record["inputs"]
    assert entry["verified"] is True and entry["input"] == "model"
    assert entry["digest"].startswith("sha256:") and entry["method"] == "key"
    assert entry["signer"].startswith("sha256:")
    assert json.loads(marker.read_text()) == result.record["inputs"]  # what the step was handed
    assert f"verified input model: {entry['digest']}" in result.stderr


def test_keyless_signature_from_the_profiles_private_sigstore(
    launch: Launch, tmp_path: Path
) -> None:
    pki = PrivateSigstore()
    model = make_model(tmp_path / "model")
    sign_with_sigstore(model, pki, tmp_path)
    root = pki.write_trusted_root(tmp_path / "trusted_root.json")
    profile = make_profile(
        models={
            "signers": [{"issuer": ISSUER, "subjectRegExp": TRUSTED_REGEXP}],
            "trustedRoot": str(root),
        }
    )
    marker = tmp_path / "ran"
    result = launch(_command(model, marker), _env(profile_trust_json(profile)))

    assert result.returncode == 0, result.stderr
    (entry,) = result.record["inputs"]
    assert (entry["method"], entry["signer"], entry["issuer"]) == ("sigstore", SIGNER, ISSUER)


def _tamper_modified(model: Path, tmp_path: Path) -> str:
    (model / "weights.bin").write_bytes(b"evil")
    return "modified: weights.bin"


def _tamper_extra(model: Path, tmp_path: Path) -> str:
    (model / "extra.pkl").write_bytes(b"pickle")
    return "not signed (extra): extra.pkl"


def _tamper_unsigned(model: Path, tmp_path: Path) -> str:
    (model / "model.sig").unlink()
    return "no signature 'model.sig' in the model folder"


def _tamper_other_signer(model: Path, tmp_path: Path) -> str:
    other, _ = new_key(tmp_path, "other")
    sign_with_key(model, other)
    return "signed by a key that is not trusted"


@pytest.mark.parametrize(
    "tamper", [_tamper_modified, _tamper_extra, _tamper_unsigned, _tamper_other_signer]
)
def test_a_model_that_does_not_verify_stops_the_step_with_78(
    launch: Launch, signed: tuple[Path, str], tmp_path: Path, tamper: object
) -> None:
    model, trust = signed
    expected = tamper(model, tmp_path)  # type: ignore[operator]
    marker = tmp_path / "ran"
    result = launch(_command(model, marker), _env(trust))

    assert result.returncode == ExitCode.VERIFY_INPUTS == 78
    assert not marker.exists()
    assert result.stage("verify-inputs")["status"] == "failed"
    assert expected in result.stage("verify-inputs")["error"]
    assert result.stage("run")["reason"] == "an earlier stage failed"
    (entry,) = result.record["inputs"]
    assert entry["verified"] is False and entry["path"] == str(model)
    assert result.record["exit_code"] == 78


def test_no_trust_stops_the_step_with_78(
    launch: Launch, signed: tuple[Path, str], tmp_path: Path
) -> None:
    model, _ = signed
    marker = tmp_path / "ran"
    result = launch(_command(model, marker), _env(""))

    assert result.returncode == 78 and not marker.exists()
    assert contract.ENV_MODEL_TRUST in result.stage("verify-inputs")["error"]


def test_a_step_without_the_executor_input_stops_with_78(
    launch: Launch, signed: tuple[Path, str], tmp_path: Path
) -> None:
    _, trust = signed
    result = launch([PY, "-c", "pass"], _env(trust))

    assert result.returncode == 78
    assert "--executor_input" in result.stage("verify-inputs")["error"]


def test_a_malformed_input_list_is_a_config_error(
    launch: Launch, signed: tuple[Path, str], tmp_path: Path
) -> None:
    model, trust = signed
    result = launch(_command(model, tmp_path / "ran"), _env(trust, inputs='[{"name":"../x"}]'))

    assert result.returncode == ExitCode.CONFIG
    assert contract.ENV_VERIFY_INPUTS in result.stage("config")["error"]


def test_steps_that_verify_nothing_skip_the_stage(launch: Launch) -> None:
    env = _env("")
    del env[contract.ENV_VERIFY_INPUTS]
    result = launch([PY, "-c", "pass"], env)

    assert result.returncode == 0
    assert result.stage("verify-inputs") == {
        "name": "verify-inputs",
        "status": "skipped",
        "reason": "the step verifies no input",
        "seconds": 0.0,
    }
