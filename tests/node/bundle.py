"""The cluster objects `secureml profile render` writes for an example profile, applied to the
test node's API server. secureml is driven through its CLI only (`.venv/bin/secureml`, else the
`secureml` on PATH), and its output read as plain YAML."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.harness.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = {  # kind -> (API prefix, namespaced)
    "Namespace": ("/api/v1", False),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", True),
    "ClusterSPIFFEID": ("/apis/spire.spiffe.io/v1alpha1", False),
}
PLURALS = {"Namespace": "namespaces", "NetworkPolicy": "networkpolicies"}


def secureml() -> str:
    beside = Path(sys.executable).parent / "secureml"
    found = str(beside) if beside.exists() else shutil.which("secureml")
    if found is None:
        raise AssertionError("the secureml CLI is not installed (make setup)")
    return found


def render(profile: str, folder: Path) -> list[dict[str, Any]]:
    """Every object `secureml profile render <profile>` writes (`profile` relative to the repo)."""
    done = subprocess.run(
        [secureml(), "profile", "render", str(ROOT / profile), "-o", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"secureml profile render {profile}: {done.stderr}{done.stdout}"
    objects = []
    for path in sorted(folder.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        objects += [document for document in yaml.safe_load_all(path.read_text()) if document]
    return objects


def apply(cluster: ControlPlane, manifest: dict[str, Any]) -> None:
    """Create one object of COLLECTIONS' kinds; one that exists already is left as it is."""
    kind = manifest["kind"]
    prefix, namespaced = COLLECTIONS[kind]
    plural = PLURALS.get(kind, kind.lower() + "s")
    meta = manifest["metadata"]
    path = (
        f"{prefix}/namespaces/{meta['namespace']}/{plural}" if namespaced else f"{prefix}/{plural}"
    )
    status, answer = cluster.request("POST", path, manifest)
    assert status in (201, 409), f"creating {kind} {meta['name']}: HTTP {status}: {answer}"


def apply_kinds(
    cluster: ControlPlane, objects: list[dict[str, Any]], kinds: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Apply the objects of `kinds` (in that order of kinds); the ones applied."""
    applied = []
    for kind in kinds:
        for manifest in objects:
            if manifest["kind"] == kind:
                apply(cluster, manifest)
                applied.append(manifest)
    if "Namespace" in kinds:
        for manifest in applied:
            if manifest["kind"] == "Namespace":
                cluster.create_default_service_account(manifest["metadata"]["name"])
    return applied
