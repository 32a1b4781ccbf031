"""GPU requests, the MIG catalogue and the per-backend mapping: exact expectations."""

from __future__ import annotations

import pytest

from secureml import MIG, TimeSlice, WholeGPU
from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.gpu import placement as gpu
from secureml.nvidia import catalogue as gpu_catalogue
from tests.support.profiles import make_profile


def test_catalogue_matches_the_mig_user_guide() -> None:
    a30 = gpu_catalogue.MIG_CATALOGUE["A30"]
    assert list(a30.profiles) == ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]
    assert (a30.compute_slices, a30.memory_slices) == (4, 4)
    assert a30.profiles["1g.6gb"].max_instances == 4
    assert a30.profiles["2g.12gb"].max_instances == 2
    expected = {
        "A100-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
        "A100-80GB": [
            "1g.10gb",
            "1g.10gb+me",
            "1g.20gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
        ],
        "H100-80GB": [
            "1g.10gb",
            "1g.10gb+me",
            "1g.20gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
        ],
        "H100-94GB": [
            "1g.12gb",
            "1g.12gb+me",
            "1g.24gb",
            "2g.24gb",
            "3g.47gb",
            "4g.47gb",
            "7g.94gb",
        ],
        "H200-141GB": [
            "1g.18gb",
            "1g.18gb+me",
            "1g.35gb",
            "2g.35gb",
            "3g.71gb",
            "4g.71gb",
            "7g.141gb",
        ],
        "B200": ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
    }
    for model, names in expected.items():
        profiles = gpu_catalogue.MIG_CATALOGUE[model].profiles
        assert list(profiles) == names, model
        assert [p.max_instances for p in profiles.values()] == [7, 1, 4, 3, 2, 1, 1], model
        assert [p.compute_slices for p in profiles.values()] == [1, 1, 1, 2, 3, 4, 7], model
        assert [p.memory_slices for p in profiles.values()] == [1, 1, 2, 2, 4, 4, 8], model
    assert gpu_catalogue.MIG_CATALOGUE["H200-141GB"].profiles["3g.71gb"].memory_gb == 71


def test_request_json_is_the_launcher_contract() -> None:
    assert MIG("1g.10gb").to_json() == '{"kind":"mig","profile":"1g.10gb","count":1}'
    assert MIG("3g.40gb", count=2).to_json() == '{"kind":"mig","profile":"3g.40gb","count":2}'
    assert (
        TimeSlice(memory="8Gi", compute=25).to_json()
        == '{"kind":"timeslice","memory":8589934592,"compute":25}'
    )
    assert (
        TimeSlice(memory=1000, compute=100).to_json()
        == '{"kind":"timeslice","memory":1000,"compute":100}'
    )
    assert WholeGPU(2).to_json() == '{"kind":"whole","count":2,"product":null}'
    assert WholeGPU(1, product="NVIDIA-H100-80GB-HBM3").to_json() == (
        '{"kind":"whole","count":1,"product":"NVIDIA-H100-80GB-HBM3"}'
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: MIG("10gb"),
        lambda: MIG("1g.10gb", count=0),
        lambda: MIG("1g.10gb", count=True),
        lambda: TimeSlice(memory="lots", compute=10),
        lambda: TimeSlice(memory="8Gi", compute=0),
        lambda: TimeSlice(memory="8Gi", compute=101),
        lambda: TimeSlice(memory=-1, compute=10),
        lambda: WholeGPU(0),
        lambda: WholeGPU(1, product="has space"),
    ],
)
def test_malformed_requests_are_refused_with_a_fix(make) -> None:
    with pytest.raises(SecuremlError) as err:
        make()
    assert err.value.fix


def test_claim_template_names_for_the_dra_bundle() -> None:
    assert gpu.claim_template_name(MIG("1g.10gb")) == "secureml-mig-1g-10gb"
    assert gpu.claim_template_name(MIG("1g.10gb+me")) == "secureml-mig-1g-10gb-me"
    assert gpu.claim_template_name(MIG("3g.40gb", count=2)) == "secureml-mig-3g-40gb-x2"
    assert gpu.claim_template_name(TimeSlice(memory="1Gi", compute=5)) == "secureml-timeslice"
    assert gpu.claim_template_name(WholeGPU(2)) == "secureml-gpu-2"
    assert (
        gpu.claim_template_name(WholeGPU(1, product="NVIDIA-H100-80GB-HBM3"))
        == "secureml-gpu-1-nvidia-h100-80gb-hbm3"
    )


def test_mixed_strategy_maps_mig_to_its_own_resource() -> None:
    placed = gpu.placement(MIG("2g.20gb"), make_profile())
    assert placed == gpu.Placement("mig", "nvidia.com/mig-2g.20gb", 1)


def test_single_strategy_selects_the_mig_suffixed_product() -> None:
    one_model = make_profile(
        gpu={
            "migStrategy": "single",
            "models": ["H100-94GB"],
            "mig": {"allowedProfiles": ["1g.12gb"]},
            "quota": None,
        }
    )
    placed = gpu.placement(MIG("1g.12gb"), one_model)
    assert placed == gpu.Placement(
        "mig", "nvidia.com/gpu", 1, {"nvidia.com/gpu.product": "NVIDIA-H100-NVL-MIG-1g.12gb"}
    )

    two_models = make_profile(
        gpu={"migStrategy": "single", "mig": {"allowedProfiles": ["1g.10gb"]}, "quota": None}
    )
    placed = gpu.placement(MIG("1g.10gb"), two_models)
    assert placed.accelerator_type == "nvidia.com/gpu"
    assert placed.node_selector == {}
    assert placed.node_affinity == [
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": [
                "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
                "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                "NVIDIA-H100-PCIe-MIG-1g.10gb",
            ],
        }
    ]


def test_time_slice_uses_the_shared_resource_and_sharing_strategy_label() -> None:
    placed = gpu.placement(TimeSlice(memory="4Gi", compute=20), make_profile())
    assert placed == gpu.Placement(
        "timeslice-shim",
        "nvidia.com/gpu.shared",
        1,
        {"nvidia.com/gpu.sharing-strategy": "time-slicing"},
    )
    no_shim = make_profile(tier="public", runtime={"shim": "off"})
    assert gpu.placement(TimeSlice(memory="4Gi", compute=20), no_shim).isolation == "timeslice"


def test_whole_gpu_goes_to_the_dedicated_pool() -> None:
    placed = gpu.placement(WholeGPU(2, product="NVIDIA-H100-80GB-HBM3"), make_profile())
    assert placed == gpu.Placement(
        "dedicated",
        "nvidia.com/gpu",
        2,
        {"secureml.dev/pool": "dedicated", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        [],
        [
            {
                "key": "secureml.dev/dedicated",
                "operator": "Equal",
                "value": "team-a",
                "effect": "NoSchedule",
            }
        ],
    )


def test_dra_backend_names_a_claim_template_instead_of_a_resource() -> None:
    profile = make_profile("team-dra")
    placed = gpu.placement(MIG("3g.40gb"), profile)
    assert placed == gpu.Placement(
        "mig", pod_labels={contract.LABEL_GPU_CLAIM: "secureml-mig-3g-40gb"}
    )
    assert gpu.allowed_accelerators(profile) == set()


def test_no_gpu_is_isolation_none_and_keeps_off_the_gpu_pools() -> None:
    """team-a names two GPU pools (time-sliced nodes, the dedicated pool): a GPU-free step excludes
    both; team-conf names none (MIG nodes carry no pool label in its profile)."""
    assert gpu.placement(None, make_profile()) == gpu.Placement(
        contract.ISOLATION_NONE,
        node_affinity=[
            {
                "key": "nvidia.com/gpu.sharing-strategy",
                "operator": "NotIn",
                "values": ["time-slicing"],
            },
            {"key": "secureml.dev/pool", "operator": "NotIn", "values": ["dedicated"]},
        ],
    )
    conf = make_profile("team-conf", images={"signatures": {"required": True}})
    assert gpu.placement(None, conf) == gpu.Placement(contract.ISOLATION_NONE)


def test_allowed_accelerators_follow_the_profile() -> None:
    assert gpu.allowed_accelerators(make_profile()) == {
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/gpu.shared",
        "nvidia.com/gpu",
    }
