"""secureml's per-tenant rules at their edges: bounds, whole path segments, literal profile values."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules import evaluate, profile_rules, rules_for_profile
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR
from tests.support.profiles import example_profile
from tests.support.submitted_pods import admitted

ALLOWED = ATTACKS_DIR.parent / "allowed"
GIB = 2**30


def allowed_pod(name: str) -> dict[str, Any]:
    return yaml.safe_load((ALLOWED / f"{name}.yaml").read_text())


def failed(pod: dict[str, Any], profile: TenantProfile | str = "team-a") -> set[str]:
    if isinstance(profile, str):
        profile = example_profile(profile)
    return {v.rule for v in evaluate(admitted(pod, profile), rules_for_profile(profile))}


def profile_with(**changes: Any) -> TenantProfile:
    data = yaml.safe_load((PROFILES_DIR / "team-a.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return TenantProfile.from_dict(data, source="test")


@pytest.mark.parametrize("name", sorted(p.stem for p in ALLOWED.glob("*.yaml")))
def test_allowed_pods(name: str) -> None:
    pod = allowed_pod(name)
    tenant = pod["metadata"]["annotations"]["test.secureml.dev/allowed-under"]
    assert failed(pod, tenant) == set()


def test_registry_prefix_is_matched_on_whole_segments() -> None:
    profile = profile_with(**{"spec.images.allowedRegistries": ["ghcr.io/acme"]})
    pod = allowed_pod("team-a-cpu")
    digest = pod["spec"]["containers"][0]["image"].split("@")[1]
    for image, ok in [
        (f"ghcr.io/acme/x@{digest}", True),
        (f"ghcr.io/acme/deep/x@{digest}", True),
        (f"ghcr.io/acmecorp/x@{digest}", False),
        (f"ghcr.io/acme@{digest}", False),
        (f"evil.io/ghcr.io/acme/x@{digest}", False),
    ]:
        pod["spec"]["containers"][0]["image"] = image
        assert ("secureml.imageRegistry" not in failed(pod, profile)) is ok, image


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("ghcr.io/kubeflow/kfp-launcher:2.17.0", True),
        ("ghcr.io/kubeflow/kfp-launcher:2.17.0@sha256:" + "a" * 64, True),
        ("ghcr.io/kubeflow/kfp-launcher@sha256:" + "a" * 64, True),
        ("ghcr.io/kubeflow/kfp-launcher:2.17.3", False),  # not KFP 2.17.0's (systemContainers)
        ("ghcr.io/kubeflow/kfp-launcher:2.17.0@sha256:" + "a" * 63, False),
        ("quay.io/argoproj/argoexec:v3.6.4", False),  # Argo's image, not in the launcher's shape
        ("ghcr.io/kubeflow/kfp-launcherx:1", False),
        ("ghcr.io/kubeflow/kfp-launcher/x:1", False),
    ],
)
def test_kfp_system_images(image: str, ok: bool) -> None:
    pod = allowed_pod("team-a-cpu")
    pod["spec"]["initContainers"][0]["image"] = image
    assert (failed(pod) == set()) is ok


def _timeslice(memory: int, compute: int, request: str | None = None) -> dict[str, Any]:
    pod = allowed_pod("team-a-timeslice")
    annotations = pod["metadata"]["annotations"]
    annotations[contract.ANNOTATION_LIMITS] = contract.render_shim_limits(
        memory_bytes=memory, compute_percent=compute, scrub_on_free=True, firewall=True
    )
    annotations[contract.ANNOTATION_GPU_REQUEST] = request or (
        f'{{"kind":"timeslice","memory":{memory},"compute":{compute}}}'
    )
    # The compiler writes the launcher's copy of the request beside the annotation.
    for env in pod["spec"]["containers"][0]["env"]:
        if env["name"] == contract.ENV_GPU_REQUEST:
            env["value"] = annotations[contract.ANNOTATION_GPU_REQUEST]
    return pod


def test_shim_limits_bounds_are_inclusive() -> None:
    assert failed(_timeslice(16 * GIB, 50)) == set()  # team-a: maxMemory 16Gi, maxCompute 50
    assert failed(_timeslice(1, 1)) == set()
    assert failed(_timeslice(16 * GIB + 1, 50)) == {"secureml.shimLimits", "secureml.gpuRequest"}
    assert failed(_timeslice(16 * GIB, 51)) == {"secureml.shimLimits", "secureml.gpuRequest"}
    assert "secureml.shimLimits" in failed(_timeslice(0, 10))


def test_gpu_request_is_the_compilers_exact_form() -> None:
    """Only the compact JSON the compiler writes; nothing a JSON reader could read differently."""
    from secureml.gpu.request import TimeSlice

    assert failed(_timeslice(1024, 50, TimeSlice(memory=1024, compute=50).to_json())) == set()
    for request in (
        '{"kind":"timeslice","memory":1024}',
        '{ "kind": "timeslice", "memory": 1024, "compute": 50 }',
        '{"compute":50,"memory":1024,"kind":"timeslice"}',
        '{"kind":"timeslice","memory":99999999999999,"compute":50,"x":{"memory":1}}',
        '{"kind":"timeslice","memory":1024,"compute":50,"memory":99999999999999}',
        '{"kind":"timeslice","memory":1024,"compute":50}\n',
    ):
        # The launcher's copy (env) is not the compiled form either.
        assert failed(_timeslice(1024, 50, request)) == {
            "secureml.gpuRequest",
            "secureml.gpuMatchesRequest",
        }, request


def test_profile_values_are_literals_in_the_text() -> None:
    small = profile_with(**{"spec.gpu.timeSlice.maxMemory": "1Gi"})
    big = profile_with(**{"spec.gpu.timeSlice.maxMemory": "32Gi"})
    small_text, big_text = (
        next(r for r in profile_rules(p) if r.id == "secureml.shimLimits").expression
        for p in (small, big)
    )
    assert small_text != big_text
    assert all("params" not in r.expression for r in profile_rules(small))
    pod = _timeslice(2 * GIB, 10)
    assert "secureml.shimLimits" in failed(pod, small)
    assert "secureml.shimLimits" not in failed(pod, big)


def test_scrub_on_free_zero_allowed_only_when_the_profile_allows_it() -> None:
    pod = _timeslice(GIB, 10)
    limits = pod["metadata"]["annotations"][contract.ANNOTATION_LIMITS].replace(
        "scrub_on_free=1", "scrub_on_free=0"
    )
    pod["metadata"]["annotations"][contract.ANNOTATION_LIMITS] = limits
    assert "secureml.shimLimits" in failed(pod)
    assert failed(pod, profile_with(**{"spec.runtime.scrubOnFree": False})) == set()


def _with_limits_firewall(pod: dict[str, Any], line: str) -> dict[str, Any]:
    """The pod with its limits' `firewall=1` line replaced by `line` (empty: left out)."""
    annotations = pod["metadata"]["annotations"]
    annotations[contract.ANNOTATION_LIMITS] = annotations[contract.ANNOTATION_LIMITS].replace(
        "firewall=1\n", line
    )
    return pod


def test_firewall_line_required_when_the_profile_enforces_it() -> None:
    """runtime.cudaFirewall: enforce (the default) admits only `firewall=1`; off also none."""
    off = profile_with(**{"spec.runtime.cudaFirewall": "off"})
    assert failed(_timeslice(GIB, 10)) == set()
    assert failed(_timeslice(GIB, 10), off) == set()  # stricter than the profile: allowed
    for line in ("firewall=0\n", "", "firewall=01\n", "firewall=1\nfirewall=0\n"):
        pod = _with_limits_firewall(_timeslice(GIB, 10), line)
        assert failed(pod) == {"secureml.shimLimits"}, line
    assert failed(_with_limits_firewall(_timeslice(GIB, 10), ""), off) == set()
    assert failed(_with_limits_firewall(_timeslice(GIB, 10), "firewall=0\n"), off) == {
        "secureml.shimLimits"
    }


@pytest.mark.parametrize(
    ("count", "ok"), [("1", True), (2, True), ("2", True), ("3", False), ("0", False)]
)
def test_whole_gpu_count(count: Any, ok: bool) -> None:
    pod = allowed_pod("team-a-whole")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = count
    assert ("secureml.wholeGpuCount" not in failed(pod)) is ok


def test_env_from_with_a_safe_prefix() -> None:
    pod = allowed_pod("team-a-cpu")
    pod["spec"]["containers"][0]["envFrom"] = [{"prefix": "APP_", "configMapRef": {"name": "c"}}]
    assert failed(pod) == set()
    pod["spec"]["containers"][0]["envFrom"][0]["prefix"] = "CUDA_"
    assert failed(pod) == {"secureml.envFrom", "secureml.nvidiaEnv"}  # CUDA_ + VERSION
    pod["spec"]["containers"][0]["envFrom"][0]["prefix"] = "CUDA_DISABLE_"
    assert failed(pod) == {"secureml.envFrom"}


def test_every_forbidden_variable_is_refused() -> None:
    for name in contract.FORBIDDEN_ENV:
        pod = allowed_pod("team-a-cpu")
        pod["spec"]["containers"][0]["env"].append({"name": name, "value": "x"})
        nvidia = {"secureml.nvidiaEnv"} if name.startswith("NVIDIA_") else set()
        loader = {"secureml.loaderEnv"} if name.startswith("LD_") else set()
        assert failed(pod) == {"secureml.forbiddenEnv"} | nvidia | loader, name


def test_tier_minimum_isolation() -> None:
    mig = allowed_pod("team-a-mig")
    conf_mig = copy.deepcopy(mig)
    assert "secureml.isolationLevel" not in failed(conf_mig, "team-conf")
    assert "secureml.isolationLevel" in failed(mig, "team-restricted")


def test_device_plugin_profiles_refuse_claims_and_dra_refuses_device_resources() -> None:
    dra = allowed_pod("team-dra-timeslice")
    assert failed(dra, "team-dra") == set()
    dra["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    assert "secureml.gpuResourceName" in failed(dra, "team-dra")
    assert {r.id for r in profile_rules(example_profile("team-dra"))} >= {"secureml.resourceClaims"}


def test_rules_written_for_every_example_profile(tmp_path: Path) -> None:
    for path in PROFILES_DIR.glob("*.yaml"):
        ids = {r.id for r in profile_rules(example_profile(path.stem))}
        assert {"secureml.requiredLabels", "secureml.imageRegistry", "secureml.forbiddenEnv",
                "secureml.runAsNonRoot", "secureml.gpuResourceName"} <= ids  # fmt: skip


@pytest.mark.parametrize("name", sorted(p.stem for p in ALLOWED.glob("team-a-*.yaml")))
def test_a_team_a_step_without_the_platform_runtime_is_refused(name: str) -> None:
    """team-a names runtime.image: its allowed pods pass only as the mutating policy leaves them;
    the same pod judged as submitted (no runtime init container, no runtime volume) is refused."""
    pod = allowed_pod(name)
    rules = rules_for_profile(example_profile("team-a"))
    assert "secureml.runtimeInjected" in {v.rule for v in evaluate(pod, rules)}
    assert failed(pod) == set()
