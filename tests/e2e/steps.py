"""The reference pipeline's step pods as `secureml compile` previews them, made runnable.

`compile_reference(image, profile, folder)` compiles pipelines/secure_finetune.py with its IMAGE
set to the session's step image (`secureml compile`, the CLI); `previewed(docs, profile)` is
`secureml.pods.preview.preview_pods`, the pods the compiler judges. The preview shows what KFP's
backend fills in at run time as `<name>` placeholders (secureml/pods/preview.py); `as_run(pod,
values)` fills them as KFP's driver would, and nothing else: the run id, execution id, the
executor input (the step's parameters and its artifacts' URIs in the run's store) and the
component spec. A test creates the pod as Argo submits it (`mutate=False`: the server's MAP
mutates it) and compares the stored pod with the mutated preview, both with exactly these values
filled in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from secureml.cli import app
from secureml.core import contract
from secureml.core.jsontree import copy_json
from secureml.pods.preview import preview_pods
from secureml.profile.model import TenantProfile

REPO = Path(__file__).resolve().parents[2]
PIPELINE = "secure-finetune"
ROWS, EPOCHS = 200, 60
PLACEHOLDERS = ("<run_id>", "<execution_id>", "<executor_input>", "<component_spec>")


def compile_reference(
    image: str,
    profile: Path,
    folder: Path,
    *,
    replace: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """pipelines/secure_finetune.py with its IMAGE set to `image` (and each text of `replace`
    replaced, each required), compiled by `secureml compile` for `profile` with `options`."""
    import yaml

    source = (REPO / "pipelines" / "secure_finetune.py").read_text()
    for old, new in (replace or {}).items():
        assert old in source, old
        source = source.replace(old, new)
    lines = [
        f'IMAGE = "{image}"' if line.startswith("IMAGE = ") else line
        for line in source.splitlines()
    ]
    (folder / "pipeline.py").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(
        app,
        ["compile", str(folder / "pipeline.py"), "--profile", str(profile),
         "-o", str(folder / "pipeline.yaml"), *options],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return list(yaml.safe_load_all((folder / "pipeline.yaml").read_text()))


def previewed(
    docs: list[dict[str, Any]], profile: TenantProfile, *, mutate: bool = True
) -> dict[str, dict[str, Any]]:
    """The previewed pods: as the server stores them (`mutate`), or as Argo submits them, before
    the tenant's MutatingAdmissionPolicy (what a test creates: the server applies the MAP)."""
    return preview_pods(docs, profile, mutate=mutate)


def run_root(run_id: str) -> str:
    return f"minio://mlpipeline/v2/artifacts/{PIPELINE}/{run_id}"


def _artifact(name: str, kind: str, uri: str) -> dict[str, Any]:
    return {
        "artifacts": [{"name": name, "type": {"schemaTitle": kind}, "uri": uri, "metadata": {}}]
    }


def executor_input(step: str, run_id: str) -> dict[str, Any]:
    """What KFP's driver passes each step of the reference pipeline (--executor_input)."""
    root = run_root(run_id)
    dataset = _artifact("dataset", "system.Dataset", f"{root}/prep/dataset")
    model = _artifact("model", "system.Model", f"{root}/train/model")
    outputs: dict[str, Any] = {"outputFile": "/tmp/kfp_outputs/output_metadata.json"}
    if step == "prep":
        inputs: dict[str, Any] = {"parameterValues": {"rows": ROWS}}
        outputs["artifacts"] = {"dataset": dataset}
    elif step == "train":
        inputs = {"parameterValues": {"epochs": EPOCHS}, "artifacts": {"dataset": dataset}}
        outputs["artifacts"] = {"model": model}
    else:
        inputs = {"artifacts": {"dataset": dataset, "model": model}}
        metrics = _artifact("metrics", "system.Metrics", f"{root}/evaluate/metrics")
        outputs["artifacts"] = {"metrics": metrics}
        outputs["parameters"] = {"Output": {"outputFile": "/tmp/kfp_outputs/Output"}}
    return {"inputs": inputs, "outputs": outputs}


def run_values(
    docs: list[dict[str, Any]], pod: dict[str, Any], step: str, execution: int
) -> dict[str, str]:
    run_id = pod["metadata"]["labels"]["pipeline/runid"]
    component = docs[0]["components"][f"comp-{step}"]
    return {
        "<run_id>": run_id,
        "<execution_id>": str(execution),
        "<executor_input>": json.dumps(executor_input(step, run_id), separators=(",", ":")),
        "<component_spec>": json.dumps(component, separators=(",", ":")),
    }


def as_run(pod: dict[str, Any], values: dict[str, str], name: str | None = None) -> dict[str, Any]:
    """The pod with KFP's run-time placeholders filled in (in main's command), renamed if asked."""
    filled = copy_json(pod)
    main = next(c for c in filled["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    main["command"] = [values.get(arg, arg) for arg in main["command"]]
    if name:
        filled["metadata"]["name"] = name
    left = [arg for arg in main["command"] if arg in PLACEHOLDERS]
    assert not left, left
    return filled


def audit_record(log: str) -> dict[str, Any]:
    lines = [ln for ln in log.splitlines() if ln.startswith(contract.AUDIT_LINE_PREFIX)]
    assert len(lines) == 1, log
    record: dict[str, Any] = json.loads(lines[0][len(contract.AUDIT_LINE_PREFIX) :])
    return record


def container_states(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container's (init ones too) terminated state by name (empty where none)."""
    statuses = [
        *pod["status"].get("initContainerStatuses", []),
        *pod["status"].get("containerStatuses", []),
    ]
    return {s["name"]: s.get("state", {}).get("terminated", {}) for s in statuses}
