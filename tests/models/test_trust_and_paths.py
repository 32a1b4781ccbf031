"""The pieces around verify_model: the profile's spec.models (validated, rendered as the trust
JSON the pod carries), the launcher reading that trust back, the podinfo annotation deciding the
inputs, and where KFP puts each input artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.enforcement.config import ConfigError, load_config
from secureml.enforcement.verify_inputs import local_path
from secureml.supplychain.model_trust import profile_trust_json
from secureml.supplychain.models import trust_from_json
from secureml.supplychain.verify_inputs import VerifiedInput
from tests.support.model_signing import ISSUER, new_key
from tests.support.private_sigstore import PrivateSigstore
from tests.support.profiles import make_profile

WIRE = '[{"name":"model","signature":"model.sig"}]'


def test_profile_keys_must_be_ecdsa_public_keys(tmp_path: Path) -> None:
    _, public = new_key(tmp_path)
    assert make_profile(models={"keys": [public.decode()]}).spec.models.keys == [public.decode()]

    rsa_pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for bad, why in ((rsa_pem.decode(), "not an ECDSA key"), ("ssh-ed25519 AAAA", "not a PEM")):
        with pytest.raises(SecuremlError) as err:
            make_profile(models={"keys": [bad]})
        assert why in err.value.diagnostics()
    with pytest.raises(SecuremlError, match="subjectRegExp"):
        make_profile(models={"signers": [{"issuer": ISSUER}]})


def test_the_trust_carries_a_private_root_inline_and_the_launcher_reads_it_back(
    tmp_path: Path,
) -> None:
    root = PrivateSigstore().write_trusted_root(tmp_path / "root.json")
    profile = make_profile(
        models={"signers": [{"issuer": ISSUER, "subject": "me"}], "trustedRoot": str(root)}
    )
    text = profile_trust_json(profile)
    assert json.loads(text)["trustedRoot"] == json.loads(root.read_text())
    assert text == profile_trust_json(profile)  # the same bytes every time: admission compares

    trust = trust_from_json(text, tmp_path / "private")
    assert json.loads(Path(trust.trusted_root).read_text()) == json.loads(root.read_text())
    assert [str(s) for s in trust.signers] == [f"me (issuer {ISSUER})"]
    assert profile_trust_json(make_profile()) == ""  # no signer: the compiler refuses the step


def test_the_public_root_is_named_and_defaults_to_the_images_one() -> None:
    profile = make_profile(models={"signers": [{"issuer": ISSUER, "subject": "me"}]})
    assert json.loads(profile_trust_json(profile))["trustedRoot"] == "production"


def test_podinfo_annotation_decides_the_inputs(tmp_path: Path) -> None:
    folder = tmp_path / "podinfo"
    folder.mkdir()
    quoted = WIRE.replace('"', '\\"')
    (folder / "annotations").write_text(f'{contract.ANNOTATION_VERIFY_INPUTS}="{quoted}"\n')
    (folder / "labels").write_text("")

    config = load_config({}, podinfo_dir=folder)
    assert config.verify_inputs == (VerifiedInput("model", "model.sig"),)
    with pytest.raises(ConfigError, match="conflicts with the pod's annotation"):
        load_config(
            {contract.ENV_VERIFY_INPUTS: '[{"name":"x","signature":"s"}]'}, podinfo_dir=folder
        )
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "annotations").write_text("")
    with pytest.raises(ConfigError, match="the pod has no annotation"):
        load_config({contract.ENV_VERIFY_INPUTS: WIRE}, podinfo_dir=empty)


@pytest.mark.parametrize(
    ("uri", "schema", "metadata", "path"),
    [
        ("gs://bucket/run/model", "system.Model", {}, "/gcs/bucket/run/model"),
        ("s3://bucket/run/data", "system.Dataset", {}, "/s3/bucket/run/data"),
        (
            "minio://mlpipeline/v2/artifacts/p/m",
            "system.Model",
            {},
            "/minio/mlpipeline/v2/artifacts/p/m",
        ),
        # KFP's modelcar: the model image's /models, through the link KFP makes under /oci/
        (
            "oci://registry.example/acme/bert:v1",
            "system.Model",
            {},
            "/oci/registry.example_acme_bert:v1/models",
        ),
        (
            "oci://registry.example/acme/data:v1",
            "system.Dataset",
            {},
            "/oci/registry.example_acme_data:v1",
        ),
        (
            "minio://mlpipeline/p/m",
            "system.Model",
            {"_kfp_workspace": True},
            "/kfp-workspace/.artifacts/minio/mlpipeline/p/m",
        ),
        ("/tmp/local/run/model", "system.Model", {}, "/tmp/local/run/model"),  # kfp.local
    ],
)
def test_input_paths_follow_the_kfp_sdk(
    uri: str, schema: str, metadata: dict[str, object], path: str
) -> None:
    from kfp.dsl import Dataset, Model

    artifact = {"uri": uri, "type": {"schemaTitle": schema}, "metadata": metadata}
    assert local_path(artifact) == Path(path)
    kind = Model if schema == "system.Model" else Dataset
    assert kind(uri=uri, metadata=dict(metadata)).path == path  # what the step's code opens
