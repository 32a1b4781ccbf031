"""The node's Go module (tests/harness/node) builds the kubelet and kube-scheduler of exactly the
control plane's Kubernetes: every module both require is at the same version, so the kubelet
matches the API server it registers with and Go's build cache serves the packages both compile."""

from __future__ import annotations

import re
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"


def _versions(go_mod: Path) -> dict[str, str]:
    """module -> version, of `require` lines and of `replace` targets (`a => b v`)."""
    versions = {}
    for line in go_mod.read_text().splitlines():
        line = line.split("//")[0].strip()
        replaced = re.fullmatch(r"(\S+)\s+=>\s+(\S+)\s+(v\S+)", line)
        if replaced:
            versions[f"{replaced[1]} =>"] = f"{replaced[2]} {replaced[3]}"
            continue
        required = re.fullmatch(r"(?:require\s+)?(\S+)\s+(v\S+)", line)
        if required and required[1] not in ("go", "module"):
            versions[required[1]] = required[2]
    return versions


def test_the_node_module_pins_the_control_planes_versions() -> None:
    control_plane = _versions(HARNESS / "controlplane" / "go.mod")
    node = _versions(HARNESS / "node" / "go.mod")
    assert node["k8s.io/kubernetes"] == control_plane["k8s.io/kubernetes"] == "v1.36.3"
    shared = control_plane.keys() & node.keys()
    assert len(shared) > 100
    differing = {
        name: (control_plane[name], node[name])
        for name in shared
        if control_plane[name] != node[name]
    }
    assert not differing, differing


def test_the_node_module_builds_only_what_the_node_runs() -> None:
    text = (HARNESS / "node" / "go.mod").read_text()
    tools = re.search(r"^tool \((.*?)^\)", text, re.S | re.M)
    assert tools is not None
    assert tools[1].split() == [
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubelet",
    ]
