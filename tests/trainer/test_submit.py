"""The submitter's pure parts: the job's name, its command, the job's own NetworkPolicy, usage."""

import re

import pytest

from secureml.core import contract
from secureml.trainer.submit import (
    EXIT_UNUSABLE,
    job_name,
    main,
    network_policy,
    submit_command,
    trainjob_of,
)
from tests.support.trainer import compiled_trainer


@pytest.mark.parametrize("step", ["train", "9-fine.tune", "x" * 80, "inner.score"])
def test_job_name_is_an_rfc1035_label_per_pod(step: str) -> None:
    name = job_name(step, "pod-a")
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63
    assert name == job_name(step, "pod-a") != job_name(step, "pod-b")


def test_the_command_carries_the_compiled_job() -> None:
    job = compiled_trainer().steps[0].trainjob
    assert job is not None
    command = submit_command(job, ["sh", "-ec", "run"])
    assert command[-4:] == ["--", "sh", "-ec", "run"]
    assert trainjob_of(["python3", "-m", "secureml.enforcement.launch", "--", *command]) == job
    assert trainjob_of(["python3", "train.py"]) is None


def test_network_policy_opens_only_the_jobs_own_pods() -> None:
    job = compiled_trainer().steps[0].trainjob
    assert job is not None
    job["metadata"]["name"] = "train-1"
    spec = network_policy(job)["spec"]
    peers = {"podSelector": {"matchLabels": {contract.LABEL_JOBSET_NAME: "train-1"}}}
    assert spec["podSelector"] == peers["podSelector"]
    assert spec["ingress"] == [{"from": [peers]}] and spec["egress"] == [{"to": [peers]}]


@pytest.mark.parametrize("argv", [[], ["--trainjob", "{}"], ["--trainjob", "{not json", "--", "x"]])
def test_unusable_arguments_exit_2(argv: list[str]) -> None:
    assert main(argv, api_client=lambda: pytest.fail("no cluster call")) == EXIT_UNUSABLE
