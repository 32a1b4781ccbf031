"""Each trainer node's launcher expects `<step's ID>/node/<index>`, the index from its podinfo."""

from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.config import ConfigError, load_config

STEP_ID = "spiffe://acme.example/ns/team-a/pipeline/fine-tune/step/train"
ENV = {
    contract.ENV_IDENTITY_REQUIRED: "true",
    contract.ENV_EXPECTED_SPIFFE_ID: STEP_ID,
    contract.ENV_STEP: "train",
}


def _podinfo(folder: Path, labels: dict[str, str]) -> Path:
    lines = [f'{key}="{value}"' for key, value in labels.items()]
    (folder / "labels").write_text("\n".join(lines) + "\n")
    (folder / "annotations").write_text(f'{contract.ANNOTATION_SPIFFE_ID}="{STEP_ID}"\n')
    return folder


def test_node_pod_expects_its_own_id(tmp_path: Path) -> None:
    labels = {
        contract.LABEL_STEP: "train",
        contract.LABEL_TRAINER_NODE: "true",
        contract.LABEL_JOB_COMPLETION_INDEX: "3",
    }
    config = load_config(ENV, podinfo_dir=_podinfo(tmp_path, labels))
    assert config.expected_spiffe_id == STEP_ID + "/node/3"


def test_step_pod_keeps_the_steps_id_and_ignores_the_local_variable(tmp_path: Path) -> None:
    env = {**ENV, contract.ENV_TRAINER_NODE: "1"}  # podinfo present: the variable is not read
    config = load_config(env, podinfo_dir=_podinfo(tmp_path, {contract.LABEL_STEP: "train"}))
    assert config.expected_spiffe_id == STEP_ID


@pytest.mark.parametrize("index", ["", "x", "-1", "12345"])
def test_node_without_a_numeric_index_stops(tmp_path: Path, index: str) -> None:
    labels = {contract.LABEL_STEP: "train", contract.LABEL_TRAINER_NODE: "true"}
    if index:
        labels[contract.LABEL_JOB_COMPLETION_INDEX] = index
    with pytest.raises(ConfigError, match="completion index"):
        load_config(ENV, podinfo_dir=_podinfo(tmp_path, labels))


def test_local_node_reads_the_local_variable(tmp_path: Path) -> None:
    config = load_config({**ENV, contract.ENV_TRAINER_NODE: "1"}, podinfo_dir=tmp_path / "none")
    assert config.expected_spiffe_id == STEP_ID + "/node/1"
