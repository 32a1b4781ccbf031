"""The golden Workflows as the harness submits them (tests/harness/kfp_golden.py), offline.

- `adapt_golden` changes a 2.17.0 golden exactly as KFP's API server does for a run
  (`kfp_workflow` of the pipeline recovered from the golden), with the harness's tenant, runner
  and images, and nothing else;
- the fields it changes are exactly those `HARNESS_CHANGES` declares;
- `golden_patches` names the claim and the secret the preview leaves unnamed from the run's
  parameters and fills in every run-time value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from secureml.core import contract
from tests.harness.kfp_golden import (
    GOLDEN_VERSION,
    HARNESS_CHANGES,
    adapt_golden,
    golden_patches,
    run_values,
)
from tests.harness.kfp_workflow import PLACEHOLDERS, kfp_workflow, pipeline_from_workflow
from tests.support.paths import fixture_dir

RUN_ID = "0b6e3c4e-9d3c-4c8e-a1f0-1f2e3d4c5b6a"
PARAMETERS = {"hello_world": {}, "pvc_mount": {"pvc_name": "golden-pvc"}, "secret_as_volume": {}}


def _golden(name: str) -> dict[str, Any]:
    path = fixture_dir("kfp-golden") / f"workflow-golden-{GOLDEN_VERSION}-{name}.yaml"
    return dict(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_adapted_as_kfps_api_server_runs_it(name: str) -> None:
    golden = _golden(name)
    adapted = adapt_golden(
        golden, name="run", namespace="team-a", run_id=RUN_ID, parameter_values=PARAMETERS[name]
    )
    docs = pipeline_from_workflow(golden)
    inputs = docs[0]["root"].get("inputDefinitions", {}).get("parameters", {})
    for key, value in PARAMETERS[name].items():  # the run's value, given as a default
        inputs[key]["defaultValue"] = value
    expected = kfp_workflow(
        docs, name="run", namespace="team-a", service_account=contract.RUNNER_NAME, run_id=RUN_ID
    )
    for parameter in expected["spec"]["arguments"]["parameters"]:
        if parameter["name"] == "components-root":  # the default added above shows here only
            (original,) = [
                p
                for p in golden["spec"]["arguments"]["parameters"]
                if p["name"] == parameter["name"]
            ]
            parameter["value"] = original["value"]
    assert adapted == expected


def _paths(old: Any, new: Any, path: str) -> Iterator[str]:
    """The paths where `new` differs from `old`, templates and containers by name."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                if key in old and key in new:
                    yield from _paths(old[key], new[key], f"{path}.{key}".lstrip("."))
                else:
                    yield f"{path}.{key}".lstrip(".")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        if all(isinstance(item, dict) and "name" in item for item in old):
            for a, b in zip(old, new, strict=True):
                yield from _paths(a, b, f"{path}[{a['name']}]")
        else:
            yield path
    else:
        yield path


def _declared(path: str) -> str:
    """A changed path as `HARNESS_CHANGES` names it."""
    if re.match(r"^spec\.templates\[[^\]]+\]\.metadata\.annotations(\..*)?$", path):
        return "spec.templates[*].metadata.annotations"
    path = re.sub(r"^(metadata|spec\.podMetadata)\.(labels|annotations)\..*$", r"\1.\2", path)
    path = re.sub(r"templates\[system-(container|dag)-driver\]", "templates[driver]", path)
    path = re.sub(r"templates\[system-container-impl\]\.initC", "templates[impl].initC", path)
    return re.sub(
        r"^spec\.templates\[entrypoint\]\.dag\.tasks\[root-driver\]\.arguments\.parameters"
        r"\[runtime-config\]\.value$",
        "spec.templates[entrypoint].dag.tasks[root-driver].arguments.runtime-config",
        path,
    )


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_only_the_declared_fields_change(name: str) -> None:
    golden = _golden(name)
    adapted = adapt_golden(
        golden, name="run", namespace="team-a", run_id=RUN_ID, parameter_values=PARAMETERS[name]
    )
    changed = {_declared(path) for path in _paths(golden, adapted, "")}
    declared = {field for field, _ in HARNESS_CHANGES}
    assert changed <= declared, sorted(changed - declared)
    must = declared - {"spec.templates[entrypoint].dag.tasks[root-driver].arguments.runtime-config"}
    assert must <= changed, sorted(must - changed)


def test_patches_name_the_runs_claim_and_secret() -> None:
    for name, volume, source, key, value in (
        ("pvc_mount", "pvc-0", "persistentVolumeClaim", "claimName", "golden-pvc"),
        ("secret_as_volume", "secret-0", "secret", "secretName", "test-secret-1"),
    ):
        docs = pipeline_from_workflow(_golden(name))
        values = run_values(docs, RUN_ID)
        patches = golden_patches(docs, values, {"pvc_name": "golden-pvc", **PARAMETERS[name],
                                                "secret_param": "test-secret-1"})  # fmt: skip
        assert patches
        for patch in map(json.loads, patches.values()):
            (found,) = [v for v in patch["volumes"] if v["name"] == volume]
            assert found[source][key] == value
            (main,) = patch["containers"]
            assert not set(main["command"]) & set(PLACEHOLDERS)
            assert main["command"][main["command"].index("--run_id") + 1] == RUN_ID
