"""The MutatingAdmissionPolicy and `apply_mutations` are the same mutations.

The rendered policy's JSONPatch expression is evaluated by the real CEL engine over a pod (with
the Kubernetes list library's `indexOf` added, and the `JSONPatch{...}` and typed
`Object.spec...{...}` constructors written as maps, which is all the Python engine lacks), the
patch it returns is applied by an independent JSON-patch implementation (`jsonpatch`), and the
result must equal `apply_mutations(pod)`. The mutated pods must still be valid Pods.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import cel
import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secureml.bundle import BundleOptions
from secureml.bundle.mutation.policy import render_policy
from secureml.core import contract
from secureml.pods.mutation.apply import apply_mutations
from secureml.pods.mutation.catalogue import CLAIM_NAME, PODINFO_VOLUME, SPIFFE_VOLUME
from secureml.profile.model import TenantProfile
from secureml.rules.engine import admission_view
from tests.bundle.conftest import load

_CONSTRUCTOR = re.compile(r"(JSONPatch|Object(\.[A-Za-z_][A-Za-z0-9_]*)*)\{")


def _as_python_cel(expression: str) -> str:
    """Rewrite `JSONPatch{op: ..., path: ...}` and `Object.spec.volumes{name: ...}` as CEL maps.

    A small scanner: string literals are copied untouched; inside a constructor's own braces,
    each bare field name before `:` is quoted.
    """
    out: list[str] = []
    i = 0
    stack: list[bool] = []  # for each open brace: is it a JSONPatch constructor?
    expect_field = False
    while i < len(expression):
        ch = expression[i]
        if ch in "\"'":
            end = i + 1
            while expression[end] != ch:
                end += 2 if expression[end] == "\\" else 1
            out.append(expression[i : end + 1])
            i = end + 1
            continue
        constructor = _CONSTRUCTOR.match(expression, i)
        if constructor and (
            i == 0 or not (expression[i - 1].isalnum() or expression[i - 1] in "._")
        ):
            out.append("{")
            stack.append(True)
            expect_field = True
            i = constructor.end()
            continue
        if ch == "{":
            stack.append(False)
        elif ch == "}":
            stack.pop()
        elif ch == "," and stack and stack[-1]:
            expect_field = True
            out.append(ch)
            i += 1
            continue
        if expect_field and (ch.isalpha() or ch == "_"):
            end = i
            while expression[end].isalnum() or expression[end] == "_":
                end += 1
            out.append(f'"{expression[i:end]}"')
            expect_field = False
            i = end
            continue
        if expect_field and not ch.isspace():
            expect_field = False
        out.append(ch)
        i += 1
    return "".join(out)


def _index_of(items: list[Any], item: Any) -> int:
    """Kubernetes' CEL list library `indexOf`: first equal element, -1 when absent."""
    for index, candidate in enumerate(items):
        if candidate == item:
            return index
    return -1


def cluster_admits(pod: dict[str, Any], profile: TenantProfile) -> dict[str, Any]:
    """What the rendered MutatingAdmissionPolicy does to `pod`, computed from the YAML alone."""
    (policy,) = render_policy(profile, BundleOptions())
    context = cel.Context({"object": admission_view(pod)})
    context.add_function("indexOf", _index_of)
    for condition in policy["spec"]["matchConditions"]:
        if cel.evaluate(condition["expression"], context) is not True:
            return copy.deepcopy(pod)
    result = copy.deepcopy(pod)
    for mutation in policy["spec"]["mutations"]:
        assert mutation["patchType"] == "JSONPatch"
        patch = cel.evaluate(_as_python_cel(mutation["jsonPatch"]["expression"]), context)
        result = jsonpatch.apply_patch(result, patch)
    return result


def _step_pod(tenant: str, isolation: str, **extra_labels: str) -> dict[str, Any]:
    """A KFP executor pod as Argo creates it: the launcher init container, main and wait."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-abc",
            "labels": {
                contract.LABEL_TENANT: tenant,
                contract.LABEL_PIPELINE: "fine-tune",
                contract.LABEL_STEP: "train",
                contract.LABEL_ISOLATION: isolation,
                **extra_labels,
            },
            "annotations": {
                contract.ANNOTATION_LIMITS: "version=1\nmemory=1\ncompute=10\nscrub_on_free=1\n"
            },
        },
        "spec": {
            "initContainers": [
                {
                    "name": "kfp-launcher",
                    "image": "ghcr.io/kubeflow/kfp-launcher:2.17.3",
                    "volumeMounts": [{"name": "kfp-launcher", "mountPath": "/kfp-launcher"}],
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/acme/train@sha256:" + "a" * 64,
                    "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
                    "volumeMounts": [{"name": "kfp-launcher", "mountPath": "/kfp-launcher"}],
                },
                {"name": "wait", "image": "quay.io/argoproj/argoexec:v3.7.0"},
            ],
            "volumes": [{"name": "kfp-launcher", "emptyDir": {}}],
        },
    }


def _volumes(pod: dict[str, Any]) -> list[str]:
    return [volume["name"] for volume in pod["spec"].get("volumes", [])]


def _team_a_without_runtime() -> TenantProfile:
    """team-a less runtime.image: the launcher and shim of the step's own image."""
    data = load("team-a").model_dump(by_alias=True, mode="json", exclude_none=True)
    del data["spec"]["runtime"]["image"]
    return TenantProfile.from_dict(data)


def test_time_sliced_step_gets_every_platform_mount() -> None:
    profile = load("team-a")
    pod = apply_mutations(_step_pod("team-a", "timeslice-shim"), profile)
    assert _volumes(pod) == ["kfp-launcher", SPIFFE_VOLUME, PODINFO_VOLUME, contract.RUNTIME_VOLUME]
    for container in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        if container["name"] == contract.RUNTIME_INIT_CONTAINER:
            continue  # the platform's installer: its volume only (test_runtime_injection.py)
        mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
        assert mounts["/spiffe-workload-api"]["name"] == SPIFFE_VOLUME
        assert mounts[contract.PODINFO_DIR]["readOnly"] is True
        assert mounts[contract.SHIM_PRELOAD_FILE]["subPath"] == "ld.so.preload"
    # team-a names runtime.image: the preload file names the injected shim
    assert pod["metadata"]["annotations"][contract.ANNOTATION_SHIM_PRELOAD] == contract.RUNTIME_SHIM
    items = pod["spec"]["volumes"][2]["downwardAPI"]["items"]
    paths = {
        f"{contract.PODINFO_DIR}/{item['path']}": item["fieldRef"]["fieldPath"] for item in items
    }
    assert (
        paths[contract.SHIM_LIMITS_PATH] == f"metadata.annotations['{contract.ANNOTATION_LIMITS}']"
    )


def test_mig_step_gets_no_shim_files_and_a_preload_annotation_is_overwritten() -> None:
    """A step that is not a shim step gets the podinfo labels and annotations the launcher reads
    (issue 10), not the limits or the preload file, where the profile injects no runtime (with
    one, every step mounts the preload file: tests/bundle/test_runtime_injection.py)."""
    profile = _team_a_without_runtime()
    for mig in (
        apply_mutations(_step_pod("team-a", "mig"), profile),
        cluster_admits(_step_pod("team-a", "mig"), profile),
    ):
        (podinfo,) = [v for v in mig["spec"]["volumes"] if v["name"] == PODINFO_VOLUME]
        assert [item["path"] for item in podinfo["downwardAPI"]["items"]] == [
            "labels",
            "annotations",
        ]
        for container in mig["spec"]["containers"] + mig["spec"]["initContainers"]:
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert contract.PODINFO_DIR in mounts
            assert contract.SHIM_PRELOAD_FILE not in mounts
        assert contract.ANNOTATION_SHIM_PRELOAD not in mig["metadata"]["annotations"]
    forged = _step_pod("team-a", "timeslice-shim")
    forged["metadata"]["annotations"][contract.ANNOTATION_SHIM_PRELOAD] = "/dev/null"
    for result in (apply_mutations(forged, profile), cluster_admits(forged, profile)):
        assert (
            result["metadata"]["annotations"][contract.ANNOTATION_SHIM_PRELOAD]
            == contract.SHIM_LIBRARY_PATH
        )


def test_other_tenants_and_unlabelled_pods_are_left_alone() -> None:
    profile = load("team-a")
    for pod in (
        _step_pod("team-b", "mig"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    ):
        assert apply_mutations(pod, profile) == pod
        assert cluster_admits(pod, profile) == pod


def test_pods_in_another_namespace_are_left_alone() -> None:
    """The policy's namespaceSelector: only the tenant namespace (CEL never sees this part)."""
    profile = load("team-a")
    pod = _step_pod("team-a", "mig")
    pod["metadata"]["namespace"] = "elsewhere"
    assert apply_mutations(pod, profile) == pod
    pod["metadata"]["namespace"] = "team-a"
    assert apply_mutations(pod, profile) != pod


def test_dra_step_gets_its_claim_on_the_main_container_only() -> None:
    profile = load("team-dra")
    pod = _step_pod("team-dra", "mig", **{contract.LABEL_GPU_CLAIM: "secureml-mig-1g-10gb"})
    admitted = apply_mutations(pod, profile)
    assert admitted["spec"]["resourceClaims"] == [
        {"name": CLAIM_NAME, "resourceClaimTemplateName": "secureml-mig-1g-10gb"}
    ]
    main, wait = admitted["spec"]["containers"]
    assert main["resources"]["claims"] == [{"name": CLAIM_NAME}]
    assert "resources" not in wait
    assert admitted == cluster_admits(pod, profile)


def test_a_pod_that_pre_empts_a_platform_volume_becomes_invalid() -> None:
    """Appends never deduplicate: a pod bringing its own `secureml-spiffe` volume ends up with two
    volumes of that name, which the API server refuses (fail closed, no fake Workload API)."""
    profile = load("team-a")
    pod = _step_pod("team-a", "mig")
    pod["spec"]["volumes"].append({"name": SPIFFE_VOLUME, "emptyDir": {}})
    assert _volumes(apply_mutations(pod, profile)).count(SPIFFE_VOLUME) == 2


@pytest.mark.parametrize("isolation", [*contract.ISOLATION_LEVELS, contract.ISOLATION_NONE])
def test_mutated_pods_are_valid_pods(profile: TenantProfile, isolation: str) -> None:
    labels = (
        {contract.LABEL_GPU_CLAIM: "secureml-timeslice"}
        if profile.spec.gpu.backend == "dra"
        else {}
    )
    pod = _step_pod(profile.metadata.name, isolation, **labels)
    admitted = apply_mutations(pod, profile)
    assert admitted == cluster_admits(pod, profile)
    for version in ("1.34", "1.36"):
        kubernetes_validate.validate(admitted, version, strict=True)


# --- property: for any shape of pod, the policy and the Python twin agree --------------------

_names = st.sampled_from(["main", "wait", "sidecar", "kfp-launcher"])
_mount = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["data", "scratch"]),
        "mountPath": st.sampled_from(["/data", "/tmp", "/scratch"]),
    }
)
_security = st.fixed_dictionaries(
    {}, optional={"readOnlyRootFilesystem": st.booleans(), "runAsNonRoot": st.booleans()}
)
_resources = st.fixed_dictionaries(
    {}, optional={"limits": st.just({"cpu": "1"}), "claims": st.just([{"name": "other"}])}
)


@st.composite
def _container(draw: st.DrawFn, name: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "ghcr.io/acme/x@sha256:" + "b" * 64}
    for key, strategy in (
        ("securityContext", _security),
        ("volumeMounts", st.lists(_mount, max_size=2)),
        ("resources", _resources),
    ):
        if draw(st.booleans()):
            container[key] = draw(strategy)
    return container


@st.composite
def _pods(draw: st.DrawFn) -> dict[str, Any]:
    labels: dict[str, str] = {}
    tenant = draw(st.sampled_from(["team-a", "team-dra", "team-conf", "other", None]))
    if tenant is not None:
        labels[contract.LABEL_TENANT] = tenant
    if draw(st.booleans()):
        labels[contract.LABEL_ISOLATION] = draw(
            st.sampled_from([*contract.ISOLATION_LEVELS, "none"])
        )
    if draw(st.booleans()):
        labels[contract.LABEL_GPU_CLAIM] = "secureml-timeslice"
    metadata: dict[str, Any] = {"name": "p", "labels": labels}
    if draw(st.booleans()):
        metadata["annotations"] = {"a": "b"}
    names = draw(st.lists(_names, min_size=1, max_size=3, unique=True))
    spec: dict[str, Any] = {"containers": [draw(_container(name)) for name in names]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(_container("init"))]
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "other", "resourceClaimTemplateName": "x"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=_pods(), tenant=st.sampled_from(["team-a", "team-dra", "team-conf"]))
def test_policy_and_python_twin_agree_on_any_pod(pod: dict[str, Any], tenant: str) -> None:
    # A pod reaches admission as JSON: no two of its parts are one object. Hypothesis may draw one
    # dict for two containers, and jsonpatch's in-place add would then change both.
    pod = json.loads(json.dumps(pod))
    profile = load(tenant)
    assert apply_mutations(pod, profile) == cluster_admits(pod, profile)


def test_the_cel_evaluation_really_mutates() -> None:
    """Guard against an agreement that holds because neither side does anything."""
    profile = load("team-a")
    pod = _step_pod("team-a", "timeslice-shim")
    admitted = cluster_admits(pod, profile)
    assert admitted != pod
    volumes = ["kfp-launcher", SPIFFE_VOLUME, PODINFO_VOLUME, contract.RUNTIME_VOLUME]
    assert _volumes(admitted) == volumes
