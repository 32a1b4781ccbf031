"""The dra backend: one ResourceClaimTemplate for every claim name the compiler can emit."""

from __future__ import annotations

import csv

from secureml.bundle import BundleOptions, render_objects
from secureml.bundle.dra import render
from secureml.core import contract
from secureml.gpu.placement import claim_template_name, placement
from secureml.gpu.request import MIG, TimeSlice
from tests.bundle.conftest import load
from tests.support.paths import fixture_dir


def _templates(name: str) -> dict[str, dict]:
    return {obj["metadata"]["name"]: obj for obj in render(load(name), BundleOptions())}


def test_every_allowed_request_has_its_template() -> None:
    profile = load("team-dra")
    templates = _templates("team-dra")
    time_slice = profile.spec.gpu.time_slice
    requests = [MIG(name) for name in profile.spec.gpu.mig.allowed_profiles]
    requests += [
        MIG("1g.10gb", count=7),
        TimeSlice(memory=time_slice.max_memory, compute=time_slice.max_compute),
    ]
    for request in requests:
        label = placement(request, profile).pod_labels[contract.LABEL_GPU_CLAIM]
        assert label == claim_template_name(request)
        assert label in templates, f"no template for {request}"


def test_mig_templates_select_the_profile_on_the_mig_device_class() -> None:
    template = _templates("team-dra")["secureml-mig-3g-40gb-x2"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["count"] == 2 and exactly["allocationMode"] == "ExactCount"
    assert exactly["selectors"] == [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}}
    ]
    # A 3g.40gb holds two per GPU on the tenant's models: no x3 template.
    assert "secureml-mig-3g-40gb-x3" not in _templates("team-dra")


def test_time_slice_template_uses_the_drivers_time_slicing_config() -> None:
    template = _templates("team-dra")["secureml-timeslice"]
    devices = template["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"] == {"deviceClassName": "gpu.nvidia.com"}
    (config,) = devices["config"]
    assert config["opaque"]["driver"] == "gpu.nvidia.com"
    assert config["opaque"]["parameters"]["kind"] == "GpuConfig"
    assert config["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"


def test_shapes_match_the_nvidia_driver_examples() -> None:
    """Device classes, API versions and opaque config kinds are ones NVIDIA's own v1 examples use."""
    rows = list(
        csv.DictReader(
            (fixture_dir("nvidia", "dra-driver-gpu") / "INDEX.tsv").open(), delimiter="\t"
        )
    )
    v1_rows = [
        row for row in rows if "resource.k8s.io/v1" in row["resource_apiVersions"].split(",")
    ]
    classes = {name for row in v1_rows for name in row["deviceClassNames"].split(",") if name}
    strategies = {name for row in v1_rows for name in row["sharing_strategies"].split(",") if name}
    kinds = {name for row in v1_rows for name in row["kinds"].split(",")}
    for template in _templates("team-dra").values():
        assert template["apiVersion"] == "resource.k8s.io/v1"
        for request in template["spec"]["spec"]["devices"]["requests"]:
            assert request["exactly"]["deviceClassName"] in classes
        for config in template["spec"]["spec"]["devices"].get("config", []):
            parameters = config["opaque"]["parameters"]
            assert parameters["kind"] in kinds and parameters["sharing"]["strategy"] in strategies


def test_device_plugin_profiles_render_no_templates() -> None:
    objects = render_objects(load("team-a"), BundleOptions())
    assert not [obj for obj in objects if obj["kind"] == "ResourceClaimTemplate"]
