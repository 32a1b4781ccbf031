"""Kubernetes' own Pod Security fixtures, per Kubernetes version, judged by `secureml check-pod`.

kubernetes/pod-security-admission generates `test/testdata/<level>/v<version>/{pass,fail}/*.yaml`
(its TestFixtures): each `pass` pod must be allowed and each `fail` pod denied at that level by the
checks of that version. They are not committed here: they come with the module
`k8s.io/pod-security-admission`, which the test control plane's go.mod already pins
(tests/harness/controlplane*/go.mod), so `go list -m` finds them in the Go module cache (and
downloads them through the module proxy on a machine that has not built the harness yet).

A version's folder exists only where a check changed (the 1.36 module's newest is v1.35), so a
cluster version is judged against the newest folder at or below it. 1.34 takes the 1.34 module's
fixtures; 1.35, 1.36 and 1.37 the 1.36 module's (no newer module is pinned: a 1.37 check revision
would not be covered until one is).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli.app import app
from secureml.core.k8s_versions import K8S_VERSIONS

HARNESS = Path(__file__).resolve().parents[1] / "harness"
MODULE = "k8s.io/pod-security-admission"
# The harness module whose pinned pod-security-admission judges each cluster version.
HARNESS_FOR = {"1.34": "controlplane-1.34", "1.35": "controlplane", "1.36": "controlplane",
               "1.37": "controlplane"}  # fmt: skip
LEVELS = ("baseline", "restricted")


@cache
def _testdata(harness: str) -> Path:
    go = shutil.which("go")
    if go is None:
        reason = "no Go toolchain: Kubernetes' Pod Security fixtures come from the Go module cache"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    listed = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", MODULE],
        cwd=HARNESS / harness,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    path = Path(listed.stdout.strip()) / "test" / "testdata"
    assert path.is_dir(), f"{path}: the module has no test/testdata"
    return path


def _version_folder(level_dir: Path, version: str) -> Path:
    """The newest `v1.N` folder at or below `version`."""
    wanted = tuple(map(int, version.split(".")))
    folders = [
        (tuple(map(int, p.name[1:].split("."))), p) for p in level_dir.iterdir() if p.is_dir()
    ]
    return max((v, p) for v, p in folders if v <= wanted)[1]


def _verdicts(level: str, version: str, files: list[Path]) -> dict[str, str]:
    result = CliRunner().invoke(
        app,
        ["check-pod", "--level", level, "--k8s-version", version, "--format", "json",
         *map(str, files)],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    return {Path(o["file"]).name: o["verdict"] for o in json.loads(result.stdout)["objects"]}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_pod_security_fixtures_of_the_version_agree(version: str, level: str) -> None:
    folder = _version_folder(_testdata(HARNESS_FOR[version]) / level, version)
    passing = sorted((folder / "pass").glob("*.yaml"))
    failing = sorted((folder / "fail").glob("*.yaml"))
    assert len(passing) >= 10 and len(failing) >= 25, folder
    allowed = _verdicts(level, version, passing)
    denied = _verdicts(level, version, failing)
    assert len(allowed) == len(passing) and len(denied) == len(failing)
    wrongly_denied = sorted(name for name, verdict in allowed.items() if verdict != "allowed")
    wrongly_allowed = sorted(name for name, verdict in denied.items() if verdict == "allowed")
    assert (wrongly_denied, wrongly_allowed) == ([], []), folder


def test_a_volume_without_a_source_is_an_empty_dir_as_the_api_defaults_it() -> None:
    """restrictedvolumes0: a volume with only a name; the Pod API makes it an emptyDir."""
    folder = _version_folder(_testdata("controlplane") / "restricted", "1.36")
    fixture = folder / "pass" / "restrictedvolumes0.yaml"
    volumes = yaml.safe_load(fixture.read_text())["spec"]["volumes"]
    assert {"name": "volume0"} in volumes  # no source at all
    assert _verdicts("restricted", "1.36", [fixture]) == {fixture.name: "allowed"}
