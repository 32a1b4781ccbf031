"""The scheduling, device and volume rules (secureml.rules.placement, .resources, .volumes) on
team-a's allowed pods: what they still admit, and the edges of what they refuse."""

from __future__ import annotations

from typing import Any

import cel
import pytest
import yaml

from secureml.rules import evaluate, rules_for_profile
from secureml.rules.engine import admission_view, compiled
from secureml.rules.resources import granted_resources
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR
from tests.support.profiles import example_profile
from tests.support.submitted_pods import admitted

TEAM_A_PROFILE = example_profile("team-a")
TEAM_A = rules_for_profile(TEAM_A_PROFILE)


def allowed(name: str = "team-a-timeslice") -> dict[str, Any]:
    return yaml.safe_load((ATTACKS_DIR.parent / "allowed" / f"{name}.yaml").read_text())


def failed(pod: dict[str, Any], rules=TEAM_A) -> set[str]:
    return {v.rule for v in evaluate(admitted(pod, TEAM_A_PROFILE), rules)}


def test_the_api_servers_default_tolerations_and_the_pools_own_are_allowed() -> None:
    pod = allowed("team-a-whole")
    pod["spec"]["tolerations"] += [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    assert failed(pod) == set()
    pod["spec"]["tolerations"].append({"key": "node.kubernetes.io/not-ready", "operator": "Exists"})
    assert failed(pod) == {"secureml.tolerations"}  # every effect, not only NoExecute


def test_platform_labels_and_own_namespace_pod_affinity_are_allowed() -> None:
    pod = allowed()
    pod["spec"]["nodeSelector"]["kubernetes.io/arch"] = "arm64"
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                term,
                {**term, "namespaces": ["team-a"]},
            ]
        }
    }
    assert failed(pod) == set()
    pod["spec"]["nodeSelector"]["kubernetes.io/arch"] = "s390x"
    assert failed(pod) == {"secureml.nodeSelector"}


def test_node_name_is_refused_on_create_only() -> None:
    pod = allowed()
    pod["spec"]["nodeName"] = "gpu-node-7"
    assert failed(pod) == {"secureml.nodeName"}
    # An UPDATE of a pod the scheduler bound (Argo labels completed pods) keeps its nodeName.
    (rule,) = [r for r in TEAM_A if r.id == "secureml.nodeName"]
    update = cel.Context({"object": admission_view(pod), "oldObject": admission_view(pod)})
    assert compiled(rule.expression).execute(update) is True


def test_priority_class_and_scheduler_from_the_profile() -> None:
    data = yaml.safe_load((PROFILES_DIR / "team-a.yaml").read_text())
    data["spec"]["scheduling"] = {
        "priorityClassNames": ["batch-low"],
        "schedulerName": "volcano",
    }
    from secureml.profile.model import TenantProfile

    rules = rules_for_profile(TenantProfile.from_dict(data, source="team-a"))
    pod = allowed()
    pod["spec"]["priorityClassName"] = "batch-low"
    pod["spec"]["schedulerName"] = "volcano"
    assert failed(pod, rules=rules) == set()
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert failed(pod, rules=rules) == {"secureml.schedulerName"}
    assert failed(pod) == {"secureml.priorityClass"}  # team-a lists no priority class


def test_gpu_free_step_must_exclude_every_pool_in_every_term() -> None:
    pod = allowed("team-a-cpu")
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    terms["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": "secureml.dev/pool", "operator": "DoesNotExist"}]}
    )  # a second term (ORed) that lets time-sliced GPU nodes in
    assert failed(pod) == {"secureml.gpuFreeOffGpuNodes"}
    terms["nodeSelectorTerms"][1]["matchExpressions"].append(
        {"key": "nvidia.com/gpu.sharing-strategy", "operator": "DoesNotExist"}
    )
    assert failed(pod) == set()


def test_hugepages_are_native_and_one_holder_per_gpu_resource() -> None:
    pod = allowed()
    pod["spec"]["containers"][0]["resources"]["limits"].update(
        {"hugepages-2Mi": "64Mi", "memory": "1Gi"}
    )
    assert failed(pod) == set()
    pod["spec"]["resources"] = {"limits": {"example.com/dongle": "1"}}
    # pod-level resources are refused whatever they name (the field allowlist); a device there
    # is not the step's compiled request either
    assert failed(pod) == {
        "secureml.resourceName",
        "secureml.podFields",
        "secureml.gpuMatchesRequest",
    }


@pytest.mark.parametrize(
    ("profile_name", "expected"),
    [
        (
            "team-a",
            {
                "nvidia.com/gpu": (2, None),
                "nvidia.com/gpu.shared": (1, None),
                "nvidia.com/mig-1g.10gb": (7, None),  # 7 fit on one GPU; quota 8
                "nvidia.com/mig-2g.20gb": (3, None),
                "nvidia.com/mig-3g.40gb": (2, None),  # no quota entry: what fits on one GPU
            },
        ),
        ("team-conf", {"nvidia.com/mig-1g.10gb": (4, None)}),  # quota 4 < 7 instances
        ("team-dra", {}),
    ],
)
def test_per_step_limits_come_from_the_catalogue_and_the_quota(
    profile_name: str, expected: dict[str, tuple[int, int | None]]
) -> None:
    granted = {
        r.name: (r.limit, r.mig_limit) for r in granted_resources(example_profile(profile_name))
    }
    for name, limits in expected.items():
        assert granted[name] == limits, name
    if not expected:
        assert granted == {}


def test_the_platforms_spiffe_volume_is_the_only_csi_volume() -> None:
    pod = allowed()
    pod["spec"]["volumes"].append(
        {"name": "secureml-spiffe", "csi": {"driver": "csi.spiffe.io", "readOnly": True}}
    )
    assert failed(pod) == set()
    pod["spec"]["volumes"][-1]["csi"]["fsType"] = "ext4"
    assert failed(pod) == {"secureml.csiVolume"}


def test_image_volume_from_the_tenant_registry_by_digest_is_allowed() -> None:
    pod = allowed()
    reference = "ghcr.io/acme/models/llama@sha256:" + "cd" * 32
    pod["spec"]["volumes"].append({"name": "weights", "image": {"reference": reference}})
    assert failed(pod) == set()
    pod["spec"]["volumes"][-1]["image"] = {"pullPolicy": "IfNotPresent"}  # no reference at all
    assert failed(pod) == {"secureml.imageVolume"}
