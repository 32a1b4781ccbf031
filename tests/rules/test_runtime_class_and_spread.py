"""Issue 10's scheduling leftovers: `runtimeClassName` only from the profile's list (or none), and
`topologySpreadConstraints`, which need no rule because the Pod API gives them no way to name
another namespace's pods (the scheduler counts the pod's own namespace only)."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, rules_for_profile
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR

ALLOWED = ATTACKS_DIR.parent / "allowed"
SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def _profile(runtime_classes: list[str]) -> TenantProfile:
    data = yaml.safe_load((PROFILES_DIR / "team-a.yaml").read_text())
    data["spec"].setdefault("scheduling", {})["runtimeClassNames"] = runtime_classes
    return TenantProfile.from_dict(data)


def _failed(pod: dict, profile: TenantProfile) -> set[str]:
    return {v.rule for v in evaluate(pod, rules_for_profile(profile))}


@pytest.mark.parametrize(
    ("listed", "asked", "ok"),
    [
        ([], None, True),
        ([], "nvidia-legacy", False),
        (["gvisor"], "gvisor", True),
        (["gvisor"], "gvisor-debug", False),
    ],
)
def test_runtime_class_only_from_the_profile(
    listed: list[str], asked: str | None, ok: bool
) -> None:
    pod = yaml.safe_load((ALLOWED / "team-a-cpu.yaml").read_text())
    if asked is not None:
        pod["spec"]["runtimeClassName"] = asked
    assert ("secureml.runtimeClass" not in _failed(pod, _profile(listed))) is ok


@pytest.mark.parametrize("version", ["v1.34.0", "v1.35.0", "v1.36.0", "v1.37.0"])
def test_topology_spread_constraints_cannot_name_a_namespace(version: str) -> None:
    """If a Kubernetes minor gives spread constraints a namespace field, the decision in
    docs/threat-model.md ("Placement inside the tenant's pools") must be made again."""
    schema = SCHEMAS / f"{version}-local-strict" / "topologyspreadconstraint-v1.json"
    if not schema.exists():
        pytest.skip(f"kubernetes_validate has no {version} schema")
    fields = set(json.loads(schema.read_text())["properties"])
    assert not {f for f in fields if "amespace" in f}, fields
    assert "labelSelector" in fields
