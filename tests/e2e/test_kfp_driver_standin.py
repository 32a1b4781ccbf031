"""The kfp-driver STAND-IN (tests/harness/e2e/kfp-driver-standin) takes the command line KFP 2.17's
compiler gives its driver pods (tests/harness/kfp_workflow.py) and writes the outputs the
Workflow's templates read. Built here with `go build` (standard library only, seconds); without Go
it skips, and fails under CI=true.

Offline, the DAG driver's outputs and the CONTAINER driver's command line are checked; fetching
the published patch from the run's object store needs a pod (its service-account token and the
`kfp-launcher` ConfigMap) and is exercised where Argo runs the Workflow on the node.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.environment import REPO
from tests.e2e.test_kfp_workflow import reference  # noqa: F401  (fixture)
from tests.harness.kfp_workflow import compile_workflow

MODULE = REPO / "tests" / "harness" / "e2e"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("go") is None:
        reason = "the kfp-driver stand-in is built with Go: not on PATH"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    binary = tmp_path_factory.mktemp("driver") / "driver"
    subprocess.run(
        ["go", "build", "-o", str(binary), "./kfp-driver-standin"],
        cwd=MODULE, check=True, env={**os.environ, "CGO_ENABLED": "0"},
    )  # fmt: skip
    return binary


def _args(template: dict[str, Any], given: dict[str, str], outputs: Path) -> list[str]:
    """The template's args as Argo fills them for one call (inputs, defaults, output paths)."""
    values = {p["name"]: p.get("default", "") for p in template["inputs"]["parameters"]}
    values |= given
    values |= {"workflow.uid": "run-1", "workflow.name": "wf-1", "workflow.creationTimestamp": "t"}

    def fill(arg: str) -> str:
        arg = re.sub(r"\{\{outputs\.parameters\.([\w-]+)\.path\}\}", rf"{outputs}/\1", arg)
        arg = re.sub(r"\{\{inputs\.parameters\.([\w-]+)\}\}", lambda m: values[m[1]], arg)
        return re.sub(r"\{\{(workflow\.\w+)\}\}", lambda m: values[m[1]], arg)

    return [fill(arg) for arg in template["container"]["args"]]


def _run(binary: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "")}  # no KUBERNETES_SERVICE_HOST: not in a pod
    return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env)


def _templates(reference: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:  # noqa: F811
    return {t["name"]: t for t in compile_workflow(reference)["spec"]["templates"]}


def test_root_dag_driver_writes_the_dag_outputs(
    driver: Path,
    reference: list[dict[str, Any]],  # noqa: F811
    tmp_path: Path,
) -> None:
    templates = _templates(reference)
    (call, _) = templates["entrypoint"]["dag"]["tasks"]
    given = {p["name"]: p["value"] for p in call["arguments"]["parameters"]}
    done = _run(driver, _args(templates["system-dag-driver"], given, tmp_path))
    assert done.returncode == 0, done.stderr
    written = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert written == {"execution-id": "1", "iteration-count": "0", "condition": "true"}


def test_container_driver_takes_kfps_command_line_and_needs_the_store(
    driver: Path,
    reference: list[dict[str, Any]],  # noqa: F811
    tmp_path: Path,
) -> None:
    templates = _templates(reference)
    call = next(t for t in templates["root"]["dag"]["tasks"] if t["name"] == "train-driver")
    given = {p["name"]: p["value"] for p in call["arguments"]["parameters"]}
    given["parent-dag-id"] = "1"
    args = _args(templates["system-container-driver"], given, tmp_path)
    assert args[:2] == ["--type", "CONTAINER"] and "--kubernetes_config" in args
    done = _run(driver, args)
    # Every flag parsed; outside a pod there is no store to fetch the patch from.
    assert done.returncode == 1
    assert "no object store: no standinStore" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())  # nothing half-written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--type", "CONTAINER", "--task_name", "t", "--bogus", "x"],
            "flag provided but not defined: -bogus",
        ),
        (["--type", "IMPORTER"], '--type "IMPORTER": one of ROOT_DAG, DAG, CONTAINER'),
        (["--type", "CONTAINER", "--run_name", "wf"], "CONTAINER needs --run_name and --task_name"),
        (["--type", "ROOT_DAG"], "needs every output path"),
    ],
)
def test_refuses_what_kfps_driver_would_not_take(
    driver: Path, args: list[str], message: str
) -> None:
    done = _run(driver, args)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr
