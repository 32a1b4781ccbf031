"""Pod labels and annotations from `kfp.kubernetes.add_pod_label`/`add_pod_annotation`, unprefixed
ones included, compile and are admitted, on the pod and in KFP's executor template that Argo
hands its executor in `ARGO_TEMPLATE`; the template admits them as map keys only."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.pods.preview import preview_pods
from secureml.pods.system_shapes import argo_template_pattern
from secureml.rules import evaluate, rules_for_profile
from tests.support.paths import ATTACKS_DIR
from tests.support.profiles import example_profile
from tests.support.submitted_pods import admitted

ALLOWED = ATTACKS_DIR.parent / "allowed"
PIPELINE = """
from kfp import dsl, kubernetes
from secureml import secure_component

@secure_component(image="ghcr.io/acme/ml-images/train@sha256:{digest}")
def prep() -> None:
    pass

@dsl.pipeline(name="labelled")
def pipeline() -> None:
    task = prep()
    kubernetes.add_pod_label(task, {label!r}, "x")
    kubernetes.add_pod_annotation(task, "owner", "alice")
"""


def _compile(tmp_path: Path, label: str) -> dict[str, Any]:
    path = tmp_path / "labelled.py"
    path.write_text(PIPELINE.format(digest="ab" * 32, label=label))
    profile = example_profile("team-a")
    compiled = compile_pipeline(load_pipeline(path), profile)
    (pod,) = preview_pods(list(yaml.safe_load_all(compiled.yaml_text)), profile).values()
    return pod


def test_an_unprefixed_pod_label_compiles_and_is_admitted(tmp_path: Path) -> None:
    pod = _compile(tmp_path, "team")
    assert pod["metadata"]["labels"]["team"] == "x"
    assert pod["metadata"]["annotations"]["owner"] == "alice"
    assert evaluate(pod, rules_for_profile(example_profile("team-a"))) == []


def _template(pod: dict[str, Any]) -> dict[str, Any]:
    for container in pod["spec"]["initContainers"]:
        for entry in container.get("env", []):
            if entry["name"] == "ARGO_TEMPLATE":
                template: dict[str, Any] = json.loads(entry["value"])
                return template
    raise AssertionError("no ARGO_TEMPLATE")


def test_the_argo_shaped_pod_carries_them_in_its_template_and_is_admitted() -> None:
    pod = yaml.safe_load((ALLOWED / "team-a-timeslice-argo-labels.yaml").read_text())
    metadata = _template(pod)["metadata"]
    assert metadata["labels"] == {"team": "x"} and metadata["annotations"]["owner"] == "alice"
    profile = example_profile("team-a")
    assert evaluate(admitted(pod, profile), rules_for_profile(profile)) == []


def test_a_label_the_pod_rules_refuse_is_refused_with_it_in_the_template() -> None:
    pod = yaml.safe_load((ATTACKS_DIR / "t35-template-label-of-another-tenant.yaml").read_text())
    assert _template(pod)["metadata"]["labels"] == {"secureml.dev/tenant": "team-b"}
    rules = rules_for_profile(example_profile("team-a"))
    assert "secureml.requiredLabels" in {v.rule for v in evaluate(pod, rules)}


def test_compiling_a_label_the_pod_rules_refuse_fails(tmp_path: Path) -> None:
    from secureml.compile.compiler import CompileError

    with pytest.raises(CompileError):
        _compile(tmp_path, "secureml.dev/tenant")


BASE = {"name": "system-container-impl", "metadata": {"annotations": {}, "labels": {}}}


def _matches(template: object) -> bool:
    text = template if isinstance(template, str) else json.dumps(template)
    return re.search(argo_template_pattern(), text) is not None


@pytest.mark.parametrize(
    "labels", [{"team": "x"}, {"a.b/c-d_e.f": ""}, {"raw": "x", "containerSet": "y"}, {}]
)
def test_any_label_key_is_admitted_in_the_templates_metadata(labels: dict[str, str]) -> None:
    template = copy.deepcopy(BASE)
    template["metadata"]["labels"] = labels
    template["metadata"]["annotations"] = labels
    assert _matches(template)


@pytest.mark.parametrize(
    "template",
    [
        # an unprefixed key outside the metadata maps is a field of Argo's types: refused
        {**BASE, "raw": {"data": "x"}},
        {**BASE, "containerSet": {"retryStrategy": {"retries": 1}}},
        # a metadata map is flat: an object value smuggles fields in
        {**BASE, "metadata": {"labels": {"team": {"raw": "x"}}}},
        {**BASE, "metadata": {"labels": {"team": 1}}},
        # not a label key, and not the maps' names as written
        {**BASE, "metadata": {"labels": {"team x": "y"}}},
        {**BASE, "metadata": {"Labels": {"team": "x"}}},
        '{"name":"t","metadata":{"labels":{"te\\u0061m":"x"}}}',
    ],
)
def test_the_template_admits_label_keys_only_as_label_keys(template: object) -> None:
    assert not _matches(template)
