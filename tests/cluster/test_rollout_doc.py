"""Issue 34, point 3: every command of docs/rollout.md runs, in order, on the test control plane.

The `sh` blocks' commands run in a shell from a folder that holds the repository's `profiles`,
`pipelines` and `tests` (so `out/` and the review file are written there, not in the checkout),
with `secureml` of this environment first on PATH and KUBECONFIG naming a control plane of their
own. A command's exit status must be the one the document writes after it (`# exit N`), else 0.
The `python` block runs as written but for KFP's address: a local stand-in of KFP's REST API
(STAND-IN, docs/testing.md) records what KFP's own client sends, and the run must name the
runner service account. What cannot run here is said in the document's last section.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "rollout.md"
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
EXIT = re.compile(r"\s+#\s*exit (\d+)$")
KFP_HOST = "https://kubeflow.example.com/pipeline"


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def commands() -> list[tuple[str, int]]:
    """(command, expected exit status) of every `sh` line, in document order."""
    out = []
    for language, text in blocks():
        if language != "sh":
            continue
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                status = EXIT.search(line)
                out.append((EXIT.sub("", line), int(status.group(1)) if status else 0))
    return out


def test_the_document_has_the_commands_it_promises() -> None:
    ran = [command.split()[:3] for command, _ in commands()]
    for promised in (
        ["secureml", "doctor", "cluster"],
        ["secureml", "profile", "apply"],
        ["secureml", "profile", "explain"],
        ["secureml", "check-pod", "--server"],
        ["kubectl", "delete", "-k"],
    ):
        assert promised in ran, promised
    assert [language for language, _ in blocks()].count("python") == 1


class _KfpApi(BaseHTTPRequestHandler):
    """Answers the three calls `create_run_from_pipeline_package` makes (healthz, the experiment
    by name, the run) and records the run it was sent."""

    runs: list[dict[str, Any]] = []

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/apis/v2beta1/experiments"):
            experiment = {"experiment_id": "e1", "display_name": "Default", "namespace": "team-a"}
            self._reply({"experiments": [experiment], "total_size": 1})
        else:
            self._reply({})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        assert self.path == "/apis/v2beta1/runs", self.path
        self.runs.append(body)
        self._reply({"run_id": "r1", "experiment_id": "e1"})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def kfp_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KfpApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _KfpApi.runs.clear()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_every_command_runs(own_k8s_cluster: ControlPlane, tmp_path: Path, kfp_api: str) -> None:
    for name in ("profiles", "pipelines", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {
        **os.environ,
        "KUBECONFIG": str(own_k8s_cluster.kubeconfig),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for command, expected in commands():
        if command.startswith("secureml check-pod --server"):
            # Kubeflow's profile controller gives each profile namespace `default-editor`; the
            # test control plane has no such controller, and without the account the server's
            # ServiceAccount admission would refuse the pod before secureml's rules see it.
            made = subprocess.run(
                ["kubectl", "create", "serviceaccount", "default-editor", "-n", "team-a"],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert made.returncode == 0, made.stderr
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == expected, f"{command}\n{done.stdout}\n{done.stderr}"
        if command.startswith("secureml profile explain"):
            assert (tmp_path / "team-a-review.md").read_text().startswith("# Tenant `team-a`")
        if command.startswith("secureml doctor cluster"):
            assert "spiffe.csi-driver" in done.stdout and "fix:" in done.stdout
        if command.startswith("secureml check-pod --server"):
            assert "secureml.serviceAccount" in done.stdout, done.stdout
    [(_, python)] = [block for block in blocks() if block[0] == "python"]
    compiled = subprocess.run(
        ["secureml", "compile", "pipelines/secure_finetune.py", "--profile",
         "examples/profiles/team-a-dev.yaml", "-o", str(tmp_path / "pipeline.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        exec(compile(python.replace(KFP_HOST, kfp_api), str(DOC), "exec"), {})
    finally:
        os.chdir(cwd)
    [run] = _KfpApi.runs
    assert run["service_account"] == "secureml-pipeline-runner"
    assert run["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "secure-finetune"
