"""The injected runtime (issue 10, class 9): the mutating policy adds the platform's runtime init
container, its emptyDir and the read-only mounts, the same in the rendered policy and in
`apply_mutations`, and only where the profile names `runtime.image`."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from secureml.core import contract
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.mutation.catalogue import runtime_init_container
from secureml.profile.model import TenantProfile
from tests.bundle.conftest import load
from tests.bundle.test_mutation import _step_pod, cluster_admits


def _mutated(tenant: str, isolation: str) -> list[dict[str, Any]]:
    profile = load(tenant)
    pod = _step_pod(tenant, isolation)
    pod["metadata"]["namespace"] = profile.spec.namespace
    return [apply_mutations(pod, profile), cluster_admits(pod, profile)]


def _team_a_injected() -> TenantProfile:
    data = load("team-a").model_dump(by_alias=True, mode="json")
    data["spec"]["runtime"]["image"] = "registry.acme.example/rt@sha256:" + "e" * 64
    return TenantProfile.from_dict(data)


def test_runtime_init_container_volume_and_read_only_mounts() -> None:
    profile = load("team-conf")
    python, cel = _mutated("team-conf", "mig")
    assert python == cel
    init = python["spec"]["initContainers"]
    # first: KFP's launcher copy already starts with the preload file mounted on shim steps
    assert [c["name"] for c in init] == [contract.RUNTIME_INIT_CONTAINER, "kfp-launcher"]
    injected, *submitted = init
    assert injected == runtime_init_container(profile)
    assert injected["image"] == profile.spec.runtime.image
    assert injected["command"] == list(contract.RUNTIME_INSTALL_COMMAND)
    volumes = {v["name"]: v for v in python["spec"]["volumes"]}
    assert volumes[contract.RUNTIME_VOLUME] == {
        "name": contract.RUNTIME_VOLUME,
        "emptyDir": {"medium": "Memory", "sizeLimit": "128Mi"},
    }
    # every submitted container mounts it read-only; the injected one alone writes it
    for container in [*python["spec"]["containers"], *submitted]:
        assert {
            "name": contract.RUNTIME_VOLUME,
            "mountPath": contract.RUNTIME_DIR,
            "readOnly": True,
        } in container["volumeMounts"]
    assert injected["volumeMounts"] == [
        {"name": contract.RUNTIME_VOLUME, "mountPath": contract.RUNTIME_DIR}
    ]
    kubernetes_validate.validate(python, "1.33", strict=True)


def test_runtime_init_container_first_in_a_pod_without_init_containers() -> None:
    """The policy creates the list, then adds at index 0: the same pod from CEL and Python."""
    profile = load("team-conf")
    pod = _step_pod("team-conf", "mig")
    pod["metadata"]["namespace"] = profile.spec.namespace
    del pod["spec"]["initContainers"]
    python, cel = apply_mutations(pod, profile), cluster_admits(pod, profile)
    assert python == cel
    assert [c["name"] for c in python["spec"]["initContainers"]] == [
        contract.RUNTIME_INIT_CONTAINER
    ]


def test_no_runtime_image_no_injection() -> None:
    data = load("team-a").model_dump(by_alias=True, mode="json", exclude_none=True)
    del data["spec"]["runtime"]["image"]
    profile = TenantProfile.from_dict(data)
    pod = _step_pod("team-a", "mig")
    pod["metadata"]["namespace"] = profile.spec.namespace
    python, cel = apply_mutations(pod, profile), cluster_admits(pod, profile)
    assert python == cel
    assert [c["name"] for c in python["spec"]["initContainers"]] == ["kfp-launcher"]
    assert contract.RUNTIME_VOLUME not in {v["name"] for v in python["spec"]["volumes"]}


def test_shim_steps_preload_the_injected_shim() -> None:
    profile = _team_a_injected()
    pod = _step_pod("team-a", "timeslice-shim")
    for mutated in (apply_mutations(pod, profile), cluster_admits(pod, profile)):
        annotations = mutated["metadata"]["annotations"]
        assert annotations[contract.ANNOTATION_SHIM_PRELOAD] == contract.RUNTIME_SHIM
    assert apply_mutations(pod, profile) == cluster_admits(pod, profile)
