"""The real API server holds a verify_inputs= step to the profile's model trust: the compiled pod
(its SECUREML_MODEL_TRUST carrying the profile's private trusted root inline, a long CEL string
literal in secureml.launcherEnv) is admitted as previewed; the same pod with the attacker's trust,
or with an input list unlike its annotation, is refused by secureml.launcherEnv."""

import copy
from pathlib import Path
from typing import Any

import yaml
from kfp import dsl

from secureml import secure_component
from secureml.compile.compiler import compile_pipeline
from secureml.core import contract
from secureml.pods.preview import preview_pods
from secureml.profile.model import TenantProfile
from tests.harness.controlplane import ControlPlane
from tests.support.admission import create_pod, delete_pod, differences, install_tenant
from tests.support.private_sigstore import PrivateSigstore
from tests.support.profiles import merge, profile_data

REPO = Path(__file__).resolve().parents[2]


IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "1" * 64


@secure_component(image=IMAGE)
def fetch(model: dsl.Output[dsl.Model]) -> None:
    pass


@secure_component(image=IMAGE, verify_inputs=["model"])
def train(model: dsl.Input[dsl.Model]) -> None:
    pass


@dsl.pipeline(name="signed-models")
def signed_models() -> None:
    train(model=fetch().outputs["model"])


def _profile(root: Path) -> TenantProfile:
    data = profile_data("team-a")
    data["metadata"]["name"] = "models-trust"
    signers = [{"issuer": "https://token.actions.githubusercontent.com", "subject": "me"}]
    models = {"signers": signers, "trustedRoot": str(root)}
    data["spec"] = merge(data["spec"], {"namespace": "models-trust", "models": models})
    return TenantProfile.from_dict(data, source="test:models-trust")


def _set_env(pod: dict[str, Any], name: str, value: str) -> dict[str, Any]:
    changed = copy.deepcopy(pod)
    (main,) = [c for c in changed["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER]
    (entry,) = [e for e in main["env"] if e["name"] == name]
    entry["value"] = value
    changed["metadata"]["name"] += "-changed"
    return changed


def test_the_model_trust_is_pinned_by_the_server(k8s_cluster: ControlPlane, tmp_path: Path) -> None:
    root = PrivateSigstore().write_trusted_root(tmp_path / "trusted_root.json")
    profile = _profile(root)
    compiled = compile_pipeline(signed_models, profile)
    cluster = install_tenant(k8s_cluster, profile)
    namespace = profile.spec.namespace
    docs = list(yaml.safe_load_all(compiled.yaml_text))
    sent = preview_pods(docs, profile, mutate=False)  # as KFP and Argo create them
    (task,) = [
        t for t, p in sent.items() if p["metadata"]["labels"][contract.LABEL_STEP] == "train"
    ]
    pod, expected = sent[task], preview_pods(docs, profile)[task]
    assert len(_env(pod)[contract.ENV_MODEL_TRUST]) > 1000  # the private root travels inline

    answer = create_pod(cluster, pod, namespace)
    assert answer.created is not None, answer.message
    try:
        assert differences(expected, answer.created) == []
    finally:
        delete_pod(cluster, answer.created)

    attacker = _env(pod)[contract.ENV_MODEL_TRUST].replace('"subject":"me"', '"subject":"evil"')
    other_inputs = '[{"name":"other","signature":"model.sig"}]'
    for name, value in (
        (contract.ENV_MODEL_TRUST, attacker),
        (contract.ENV_VERIFY_INPUTS, other_inputs),
    ):
        refused = create_pod(cluster, _set_env(pod, name, value), namespace)
        assert refused.created is None, name
        assert "secureml.launcherEnv" in {f.rule for f in refused.findings}, refused.message


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (main,) = [c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER]
    return {e["name"]: e.get("value", "") for e in main["env"]}
