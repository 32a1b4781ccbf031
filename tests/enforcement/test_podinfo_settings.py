"""The launcher's pod-level settings come from the read-only podinfo files where they exist, and an
environment that disagrees with them stops it (issue 10: settings the pod author cannot write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.core import contract
from secureml.enforcement.config import ConfigError, load_config
from secureml.enforcement.podinfo import PodInfoError, parse_downward_api, read_podinfo
from secureml.gpu.request import TimeSlice

REQUEST = '{"kind":"timeslice","memory":1073741824,"compute":25}'
SPIFFE_ID = "spiffe://acme.example/ns/team-a/pipeline/p/step/train"


def _quote(value: str) -> str:
    """What the kubelet writes (Go's strconv.Quote) for the values used here."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _podinfo(tmp_path: Path, labels: dict[str, str], annotations: dict[str, str]) -> Path:
    folder = tmp_path / "podinfo"
    folder.mkdir()
    for name, values in (("labels", labels), ("annotations", annotations)):
        lines = "".join(f"{k}={_quote(v)}\n" for k, v in sorted(values.items()))
        (folder / name).write_text(lines)
    return folder


LABELS = {
    contract.LABEL_TENANT: "team-a",
    contract.LABEL_PIPELINE: "p",
    contract.LABEL_STEP: "train",
    contract.LABEL_ISOLATION: "timeslice-shim",
}
ANNOTATIONS = {
    contract.ANNOTATION_GPU_REQUEST: REQUEST,
    contract.ANNOTATION_SPIFFE_ID: SPIFFE_ID,
    contract.ANNOTATION_LIMITS: "version=1\nmemory=1073741824\ncompute=25\nscrub_on_free=1\n",
}


def test_downward_api_files_parse_go_quoted_values(tmp_path: Path) -> None:
    info = read_podinfo(_podinfo(tmp_path, LABELS, ANNOTATIONS))
    assert info.present
    assert info.labels == LABELS
    assert info.annotations[contract.ANNOTATION_LIMITS].count("\n") == 4
    assert info.annotations[contract.ANNOTATION_GPU_REQUEST] == REQUEST


@pytest.mark.parametrize(
    "text", ["a=b\n", 'a="b\n', '="b"\n', 'a="x"\na="y"\n', 'a="b" + __import__("os")\n']
)
def test_malformed_podinfo_is_refused(text: str) -> None:
    with pytest.raises(PodInfoError):
        parse_downward_api(text, where="labels")


def test_no_podinfo_files_leave_the_environment_as_it_is(tmp_path: Path) -> None:
    assert read_podinfo(tmp_path / "absent").present is False
    config = load_config(
        {contract.ENV_ISOLATION: "none", contract.ENV_STEP: "x"}, podinfo_dir=tmp_path / "absent"
    )
    assert config.isolation == "none" and config.step == "x"


def test_settings_come_from_the_pods_metadata(tmp_path: Path) -> None:
    """The environment need not repeat them: the podinfo files are the source."""
    config = load_config({}, podinfo_dir=_podinfo(tmp_path, LABELS, ANNOTATIONS))
    assert config.isolation == "timeslice-shim"
    assert config.gpu_request == TimeSlice(memory="1Gi", compute=25)
    assert (config.tenant, config.step) == ("team-a", "train")
    assert config.expected_spiffe_id == SPIFFE_ID


def test_an_agreeing_environment_is_accepted(tmp_path: Path) -> None:
    env = {
        contract.ENV_ISOLATION: "timeslice-shim",
        contract.ENV_GPU_REQUEST: REQUEST,
        contract.ENV_TENANT: "team-a",
        contract.ENV_STEP: "train",
        contract.ENV_EXPECTED_SPIFFE_ID: SPIFFE_ID,
        contract.ENV_SHIM_MODE: "enforce",
    }
    config = load_config(env, podinfo_dir=_podinfo(tmp_path, LABELS, ANNOTATIONS))
    assert config.shim_required


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (contract.ENV_ISOLATION, "none"),  # the launcher told the step has no GPU
        (contract.ENV_ISOLATION, "dedicated"),
        (contract.ENV_GPU_REQUEST, '{"kind":"timeslice","memory":99999999999,"compute":100}'),
        (contract.ENV_STEP, "other-step"),
        (contract.ENV_EXPECTED_SPIFFE_ID, "spiffe://acme.example/ns/team-a/pipeline/p/step/x"),
    ],
)
def test_a_conflicting_environment_stops_the_launcher(
    tmp_path: Path, name: str, value: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({name: value}, podinfo_dir=_podinfo(tmp_path, LABELS, ANNOTATIONS))
    assert name in err.value.what and "conflicts" in err.value.what


def test_a_setting_the_pod_does_not_carry_is_a_conflict(tmp_path: Path) -> None:
    """A GPU request in the environment of a pod whose metadata asks for no GPU."""
    labels = {**LABELS, contract.LABEL_ISOLATION: "none"}
    folder = _podinfo(tmp_path, labels, {contract.ANNOTATION_SPIFFE_ID: SPIFFE_ID})
    with pytest.raises(ConfigError) as err:
        load_config({contract.ENV_GPU_REQUEST: REQUEST}, podinfo_dir=folder)
    assert contract.ANNOTATION_GPU_REQUEST in err.value.what


def test_unreadable_podinfo_fails_closed(tmp_path: Path) -> None:
    folder = _podinfo(tmp_path, LABELS, ANNOTATIONS)
    (folder / "labels").write_text("not a downward api line\n")
    with pytest.raises(ConfigError):
        load_config({}, podinfo_dir=folder)
