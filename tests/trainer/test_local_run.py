"""`secureml run --local` of a 2-node TrainJob: the step's launcher runs the submitter, which starts
two node processes, each under its own launcher with its own SPIFFE ID, that meet on loopback
through the plain-Python stand-in rendezvous (torch is not installed here)."""

from pathlib import Path

import pytest
from kfp import dsl

from secureml import secure_component
from secureml.core.errors import SecuremlError
from secureml.localrun.runner import RunLayout, run_pipeline
from tests.support.compiled import IMAGE
from tests.support.trainer import trainer_pipeline, trainer_profile


@secure_component(image=IMAGE, nodes=2, trainer_runtime="torch-distributed")
def train(folder: str) -> None:
    import os

    from secureml.trainer.standin import all_reduce_sum

    rank = int(os.environ["PET_NODE_RANK"])
    total = all_reduce_sum(rank + 1)
    with open(os.path.join(folder, f"node-{rank}"), "w") as handle:
        handle.write(f"{total} {os.environ['SECUREML_SVID_CERT'] != ''}")


@dsl.pipeline(name="fine-tune")
def two_nodes(folder: str) -> None:
    train(folder=folder)


def test_two_nodes_meet_on_loopback_each_under_its_launcher(tmp_path: Path) -> None:
    profile = trainer_profile()
    out = tmp_path / "nodes"
    out.mkdir()
    result = run_pipeline(
        two_nodes, profile, RunLayout(tmp_path / "run"), arguments={"folder": str(out)},
        dev_identity=True,
    )  # fmt: skip
    assert result.succeeded, result.failure
    assert sorted(p.read_text() for p in out.iterdir()) == ["3 True", "3 True"]
    step_id = profile.spiffe_id("fine-tune", "train")
    ids = sorted(r["spiffe_id"] for r in result.records if r["step"] == "train")
    assert ids == [step_id, f"{step_id}/node/0", f"{step_id}/node/1"]
    for record in result.records:
        stages = {stage["name"]: stage["status"] for stage in record["stages"]}
        assert stages["identity"] == "ok" and stages["run"] == "ok"


def test_gpu_nodes_need_a_gpu_locally(tmp_path: Path) -> None:
    from secureml.localrun.runner import machine_has_gpu

    if machine_has_gpu():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    with pytest.raises(SecuremlError, match="run their nodes on GPUs"):
        run_pipeline(trainer_pipeline(), trainer_profile(), RunLayout(tmp_path / "run"),
                     dev_identity=True)  # fmt: skip
