"""Every pod the compiler previews is created and admitted by the real API server, with the tenant's
bundle in force (MutatingAdmissionPolicy, ValidatingAdmissionPolicies, PodSecurity restricted,
the ResourceQuota counted by kube-controller-manager), and is stored exactly as the preview says.

Pipelines: every file of pipelines/ and examples/, under every example tenant it compiles for, and
the shapes the compiler tests compile (a plain `dsl.component`, a whole-GPU container component, a
nested pipeline, MIG `single` with one product and with several, DRA). The pods sent are the ones
KFP and Argo create (`preview_pods` without the mutating policy, `preview_driver_pods`); the
server's mutating policy must turn each executor pod into `preview_pods`' pod, modulo the fields
the server itself adds (`admission.SERVER_DEFAULTS`: Pod API defaults, the ServiceAccount
admission's token volume and mounts, DefaultTolerationSeconds' tolerations, requests defaulted to
limits, quantities in canonical form). The offline verdict on each pod is the server's: admitted.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml import MIG, TimeSlice, secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.preview import preview_driver_pods, preview_pods
from secureml.profile.model import TenantProfile, load_profile
from secureml.rules import evaluate, rules_for_profile
from tests.harness.controlplane import ControlPlane
from tests.support.admission import create_pod, delete_pod, differences, install_tenant
from tests.support.profiles import merge, profile_data
from tests.support.sample_steps import kfp_step, outer, plain_step, whole_container

REPO = Path(__file__).resolve().parents[2]


# kube-apiserver 1.36.3 panics in the mutating policy's JSON patch when a `value` is a list literal
# of typed objects (`[Object.spec.resourceClaims{...}]`, cel-go baseList.ConvertToNative); the
# request gets no answer. secureml/bundle/mutation/jsonpatch_cel.py therefore appends item by item
# (`add .../-`) after creating a missing list: the DRA cases below are the regression test for that.
# examples/rule_breaker.py shows what `secureml compile` refuses: no tenant compiles it, no pods.
REFUSED_BY_DESIGN = ("rule_breaker",)
EXAMPLE_TENANTS = sorted((REPO / "profiles").glob("*.yaml"))
PIPELINE_FILES = sorted((REPO / "pipelines").glob("*.py")) + sorted(
    (REPO / "examples").glob("*.py")
)


@dataclass(frozen=True)
class Case:
    """A pipeline and the tenant it is compiled for."""

    name: str
    pipeline: Callable[[], Any]
    profile: Callable[[], TenantProfile]


def _variant(tenant: str, base: str = "team-a", **spec_changes: Any) -> TenantProfile:
    """An example profile changed as a compiler test changes it, as a tenant of its own (its own
    namespace and policies, so the example tenants on the shared server stay as they are)."""
    data = profile_data(base)
    data["metadata"]["name"] = tenant
    data["spec"] = merge(data["spec"], {**spec_changes, "namespace": tenant})
    return TenantProfile.from_dict(data, source=f"test:{tenant}")


def _one_step(step: Any) -> Callable[[], Any]:
    def build() -> Any:
        from kfp import dsl

        @dsl.pipeline(name="shape")
        def shape() -> None:
            step(x=1)

        return shape

    return build


def _no_argument_step(step: Any) -> Callable[[], Any]:
    def build() -> Any:
        from kfp import dsl

        @dsl.pipeline(name="shape")
        def shape() -> None:
            step()

        return shape

    return build


INJECTED_RUNTIME = "registry.acme.example/platform/secureml-runtime@sha256:" + "d" * 64
SINGLE_ONE = {"migStrategy": "single", "models": ["H100-94GB"], "mig": {"allowedProfiles": ["1g.12gb"]},
              "wholeGpu": None, "quota": None}  # fmt: skip
SINGLE_SEVERAL = {"migStrategy": "single", "mig": {"allowedProfiles": ["1g.10gb"]}, "quota": None}
COMPILER_SHAPES = [
    Case("plain-dsl-component", _one_step(kfp_step), lambda: _variant("shape-plain")),
    Case("whole-gpu-container", _no_argument_step(whole_container), lambda: _variant("shape-whole")),
    Case("nested-pipeline", lambda: outer, lambda: _variant("shape-nested")),
    Case("mig-single-one-product",
         _one_step(secure_component(gpu=MIG("1g.12gb"))(plain_step)),
         lambda: _variant("shape-single-one", gpu=SINGLE_ONE)),
    Case("mig-single-several-products",
         _one_step(secure_component(gpu=MIG("1g.10gb"))(plain_step)),
         lambda: _variant("shape-single-several", gpu=SINGLE_SEVERAL)),
    Case("dra-timeslice",
         _one_step(secure_component(gpu=TimeSlice(memory="4Gi", compute=20))(plain_step)),
         lambda: _variant("shape-dra", base="team-dra")),
    # issue 10 class 9: the reference pipeline with the platform's runtime injected (init
    # container, emptyDir, read-only mounts, the injected launcher, the injected shim preloaded)
    Case("reference-pipeline-injected-runtime",
         lambda: load_pipeline(REPO / "pipelines" / "secure_finetune.py"),
         lambda: _variant("shape-runtime", runtime={"image": INJECTED_RUNTIME})),
]  # fmt: skip


def _pods(
    compiled_yaml: str, profile: TenantProfile
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, the pod KFP and Argo create, the pod the preview says the cluster admits)."""
    docs = list(yaml.safe_load_all(compiled_yaml))
    created_by_kfp = preview_pods(docs, profile, mutate=False)  # without the mutating policy
    previewed = preview_pods(docs, profile)
    pods = []
    for task, pod in created_by_kfp.items():
        assert apply_mutations(pod, profile) == previewed[task]  # the same mutation, both ways
        pods.append((task, pod, previewed[task]))
    pods += [(name, pod, pod) for name, pod in preview_driver_pods(docs, profile).items()]
    return pods


def _check_admitted(k8s_cluster: ControlPlane, compiled_yaml: str, profile: TenantProfile) -> int:
    cluster = install_tenant(k8s_cluster, profile)
    rules = rules_for_profile(profile)
    count = 0
    for name, sent, expected in _pods(compiled_yaml, profile):
        assert evaluate(expected, rules) == [], f"{name}: the offline engine refuses it"
        answer = create_pod(cluster, sent, profile.spec.namespace)
        assert answer.created is not None, f"{name}: the server refuses it: {answer.message}"
        try:
            assert differences(expected, answer.created) == [], name
        finally:
            delete_pod(cluster, answer.created)
        count += 1
    return count


def _pairs() -> list[Any]:
    pairs = []
    for path in PIPELINE_FILES:
        for tenant in EXAMPLE_TENANTS:
            pairs.append(pytest.param(path, tenant, id=f"{path.stem}-{tenant.stem}"))
    return pairs


@pytest.mark.parametrize(("path", "tenant"), _pairs())
def test_pipeline_pods_are_admitted_as_previewed(
    k8s_cluster: ControlPlane, path: Path, tenant: Path
) -> None:
    profile = load_profile(tenant)
    try:
        compiled = compile_pipeline(load_pipeline(path), profile)
    except CompileError as err:
        # The tenant forbids what the pipeline asks for: a compile rule, never an admission rule
        # (those the preview's pods would then break on the server).
        assert path.stem in REFUSED_BY_DESIGN or not [
            v for v in err.violations if v.rule.startswith(("pss.", "secureml."))
        ], err.violations
        return
    assert path.stem not in REFUSED_BY_DESIGN, "the example of a refused pipeline compiles"
    assert _check_admitted(k8s_cluster, compiled.yaml_text, profile) > 0


def test_the_reference_pipeline_compiles_for_some_tenant() -> None:
    """So that the pairs above are not all refusals."""
    reference = REPO / "pipelines" / "secure_finetune.py"
    compiled_for = []
    for tenant in EXAMPLE_TENANTS:
        try:
            compile_pipeline(load_pipeline(reference), load_profile(tenant))
        except CompileError:
            continue
        compiled_for.append(tenant.stem)
    assert len(compiled_for) >= 2, compiled_for


@pytest.mark.parametrize("case", COMPILER_SHAPES, ids=lambda c: c.name)
def test_compiler_shapes_are_admitted_as_previewed(k8s_cluster: ControlPlane, case: Case) -> None:
    profile = case.profile()
    compiled = compile_pipeline(case.pipeline(), profile)
    assert compiled.admission_checked
    assert _check_admitted(k8s_cluster, compiled.yaml_text, profile) > 0


def test_time_sliced_step_gets_the_injected_shim_whatever_the_pod_says(
    k8s_cluster: ControlPlane,
) -> None:
    """Issue 10, class 9 on a shim step: the tenant's pod names its own library in the preload
    annotation; the server stores the injected shim there (the mutating policy sets it), and the
    runtime init container first."""
    profile = _variant("shape-runtime-ts", runtime={"image": INJECTED_RUNTIME})
    compiled = compile_pipeline(load_pipeline(REPO / "pipelines" / "secure_finetune.py"), profile)
    cluster = install_tenant(k8s_cluster, profile)
    (sent,) = [
        pod
        for _, pod, _ in _pods(compiled.yaml_text, profile)
        if pod["metadata"]["labels"].get(contract.LABEL_ISOLATION) == "timeslice-shim"
    ]
    sent["metadata"].setdefault("annotations", {})[contract.ANNOTATION_SHIM_PRELOAD] = "/tmp/own.so"
    answer = create_pod(cluster, sent, profile.spec.namespace)
    assert answer.created is not None, answer.message
    try:
        stored = answer.created
        assert stored["metadata"]["annotations"][contract.ANNOTATION_SHIM_PRELOAD] == (
            contract.RUNTIME_SHIM
        )
        assert stored["spec"]["initContainers"][0]["name"] == contract.RUNTIME_INIT_CONTAINER
    finally:
        delete_pod(cluster, answer.created)
