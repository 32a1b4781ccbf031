"""Pods on the session's real API server: tenants installed as a platform runs them, pods created
for real, the created object compared with the preview, verdicts compared with the offline engine.

A tenant is installed once per server: its bundle applied by `secureml.cluster.apply_bundle`
(`tests/support/cluster_bundles.admin` for the connection) with a plain ResourceQuota
(`kubeflow_profile=False`: no Kubeflow profile controller runs to turn the Profile into one), the
service accounts a Kubeflow profile namespace has, the quota's usage computed by the harness's
kube-controller-manager (`wait_for_quotas`), and the pod admission policies loaded
(`wait_in_force`; `wait_for_policy` for a test that needs another policy in force). Pods are
created for real and deleted again; `settle_quota` waits until the quota controller has released
what a deleted pod held, so a quota'd GPU is free for the next pod.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

from secureml.admission.server import findings_of
from secureml.bundle import BundleOptions, render_objects
from secureml.cluster import Cluster, apply_bundle
from secureml.cluster.connection import ServerRefusedError
from secureml.core import contract
from secureml.core.violation import Violation
from secureml.pods.mutation.apply import apply_mutations
from secureml.profile.model import TenantProfile
from tests.harness.controlplane import ControlPlane
from tests.support.cluster_bundles import admin
from tests.support.paths import REPO

_INSTALLED: dict[tuple[str, str], Cluster] = {}


def install_tenant(k8s_cluster: ControlPlane, profile: TenantProfile) -> Cluster:
    """The tenant's bundle in force on the server (once per server and tenant); the connection."""
    key = (k8s_cluster.url, profile.metadata.name)
    if key not in _INSTALLED:
        cluster = admin(k8s_cluster)
        bundle = render_objects(profile, BundleOptions(kubeflow_profile=False))
        apply_bundle(bundle, cluster=cluster, typecheck_timeout_s=0)
        namespace = profile.spec.namespace
        k8s_cluster.create_default_service_account(namespace)
        for account in KUBEFLOW_ACCOUNTS:
            status, answer = k8s_cluster.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
            )
            assert status in (201, 409), answer  # 409: there already
        k8s_cluster.wait_for_quotas(namespace)
        wait_in_force(cluster, profile)
        _INSTALLED[key] = cluster
    return _INSTALLED[key]


# What Kubeflow's profile controller creates in every profile namespace (pods may name them).
KUBEFLOW_ACCOUNTS = ("default-editor", "default-viewer")
PROBE_POD = REPO / "tests" / "rules" / "allowed" / "kfp-driver.yaml"


def wait_in_force(cluster: Cluster, profile: TenantProfile, timeout_s: float = 90.0) -> None:
    """Wait until the API server enforces the bundle's admission policies: the policy plugins
    load new policies and bindings from informers, so the first pods after an apply may pass
    unjudged. Probes (dry runs), from KFP's driver pod, which both policies admit:
    with a forbidden variable (`validate-pods` refuses it), with a GPU (a step pod then, without
    secureml labels: `validate-steps` refuses it), with the tenant label (the mutating policy
    changes it as `apply_mutations` says)."""
    namespace = profile.spec.namespace
    driver = yaml.safe_load(PROBE_POD.read_text())
    driver["metadata"] = {"generateName": "probe-", "namespace": namespace}
    main = driver["spec"]["containers"][-1]
    env_probe = copy.deepcopy(driver)
    env_probe["spec"]["containers"][-1].setdefault("env", []).append(
        {"name": "LD_PRELOAD", "value": "/x.so"}
    )
    gpu_probe = copy.deepcopy(driver)
    gpu_probe["spec"]["containers"][-1]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    labelled = copy.deepcopy(driver)
    labelled["metadata"]["labels"] = {contract.LABEL_TENANT: profile.metadata.name}
    mutated = apply_mutations(labelled, profile)
    assert main["name"] == "main"
    deadline = time.monotonic() + timeout_s
    while True:
        env_refused = _refused_by_policy(cluster, env_probe, namespace)
        gpu_refused = _refused_by_policy(cluster, gpu_probe, namespace)
        map_done = mutated == labelled or _mutated_like(cluster, labelled, mutated, namespace)
        if env_refused and gpu_refused and map_done:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{profile.metadata.name}'s policies not in force after {timeout_s} s: "
                f"validate-pods {env_refused}, validate-steps {gpu_refused}, mutate {map_done}"
            )
        time.sleep(0.2)


def wait_for_policy(
    refuses_probe: Callable[[], bool], policy: str, timeout_s: float = 60.0
) -> None:
    """Wait until `refuses_probe()` (a dry run the policy refuses once loaded) is True: the server
    loads each policy and binding on its own, so one policy in force says nothing of another."""
    deadline = time.monotonic() + timeout_s
    while not refuses_probe():
        assert time.monotonic() < deadline, f"{policy} not in force after {timeout_s} s"
        time.sleep(0.2)


def _refused_by_policy(cluster: Cluster, pod: dict[str, Any], namespace: str) -> bool:
    try:
        cluster.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", query={"dryRun": "All"}, body=pod
        )
    except ServerRefusedError as refusal:
        return "ValidatingAdmissionPolicy" in refusal.message
    return False


def _mutated_like(
    cluster: Cluster, pod: dict[str, Any], mutated: dict[str, Any], namespace: str
) -> bool:
    try:
        response = cluster.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", query={"dryRun": "All"}, body=pod
        )
    except ServerRefusedError:
        return True  # admitted or not, the validating probes say whether policies are loaded
    names = [v["name"] for v in response.body["spec"].get("volumes", [])]
    return all(v["name"] in names for v in mutated["spec"].get("volumes", []))


def settle_quota(cluster: Cluster, namespace: str, timeout_s: float = 30.0) -> None:
    """Wait until every ResourceQuota's usage is what the namespace's pods request (the quota
    controller recounts after a pod is deleted; until then the freed GPU still counts)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = cluster.get(f"/api/v1/namespaces/{namespace}/pods").get("items", [])
        quotas = cluster.get(f"/api/v1/namespaces/{namespace}/resourcequotas").get("items", [])
        stale = [
            quota["metadata"]["name"]
            for quota in quotas
            for key, used in (quota.get("status") or {}).get("used", {}).items()
            if int(parse_quantity(used)) != _requested(pods, key)
        ]
        if not stale:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"quota usage of {stale} in {namespace} not recounted in time")
        time.sleep(0.2)


def _requested(pods: list[dict[str, Any]], key: str) -> int:
    resource = key.removeprefix("requests.")
    total = 0
    for pod in pods:
        for container in pod["spec"].get("containers", []):
            amount = container.get("resources", {}).get("requests", {}).get(resource)
            total += int(parse_quantity(amount)) if amount is not None else 0
    return total


@dataclass(frozen=True)
class ServerAnswer:
    """What the server did with a create (or update): the stored object, or the refusal."""

    created: dict[str, Any] | None
    findings: tuple[Violation, ...] = ()
    message: str = ""

    @property
    def admitted(self) -> bool:
        return self.created is not None


# Who creates step pods in a cluster: KFP's Argo workflow controller (the example profiles'
# `identity.pipelineRunners`); `secureml.pipelineIdentity` refuses anyone else's.
PIPELINE_RUNNER = "system:serviceaccount:kubeflow:argo"


def create_pod(
    cluster: Cluster,
    pod: Mapping[str, Any],
    namespace: str,
    created_by: str | None = PIPELINE_RUNNER,
) -> ServerAnswer:
    """A real create of `pod` (it stays Pending: no nodes) by `created_by` (the admin impersonates
    that user, in `system:masters` so that RBAC lets it; None: the admin itself); refusals
    become findings."""
    body = copy.deepcopy(dict(pod))
    body.pop("status", None)
    body["metadata"]["namespace"] = namespace
    headers = cluster.api.default_headers
    if created_by is not None:
        headers["Impersonate-User"] = created_by
        headers["Impersonate-Group"] = "system:masters"
    try:
        response = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)
    except ServerRefusedError as refusal:
        return ServerAnswer(None, tuple(findings_of(refusal)), refusal.message)
    finally:
        headers.pop("Impersonate-User", None)
        headers.pop("Impersonate-Group", None)
    return ServerAnswer(response.body)


def update_pod(
    cluster: Cluster, stored: Mapping[str, Any], after: Mapping[str, Any]
) -> ServerAnswer:
    """A dry-run UPDATE of the stored pod to `after`'s metadata (all a pod update may change here)."""
    body = copy.deepcopy(dict(stored))
    for key in ("labels", "annotations"):
        body["metadata"][key] = copy.deepcopy(after["metadata"].get(key, {}))
    meta = body["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    try:
        response = cluster.request("PUT", path, query={"dryRun": "All"}, body=body)
    except ServerRefusedError as refusal:
        return ServerAnswer(None, tuple(findings_of(refusal)), refusal.message)
    return ServerAnswer(response.body)


def delete_pod(cluster: Cluster, created: Mapping[str, Any]) -> None:
    """Delete a created pod (unscheduled pods go at once) and recount the quota it held."""
    meta = created["metadata"]
    cluster.request(
        "DELETE",
        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
        query={"gracePeriodSeconds": "0"},
    )
    settle_quota(cluster, meta["namespace"])


# --- the created pod against the preview, modulo what the server adds ---------------------------
# Fields the API server sets on every pod it stores that the preview (what KFP, Argo and the
# mutating policy write) leaves out: defaulting of the Pod API, the ServiceAccount admission's
# token volume, DefaultTolerationSeconds' two tolerations. Paths are regular expressions over
# `.spec.containers[0].imagePullPolicy`-style paths; a default is ignored only where the preview
# has no value (a changed value is always a difference).
SERVER_DEFAULTS = (
    r"\.metadata\.(uid|resourceVersion|creationTimestamp|generation|managedFields)",
    r"\.status",
    r"\.spec\.(dnsPolicy|enableServiceLinks|preemptionPolicy|priority|schedulerName)",
    r"\.spec\.(terminationGracePeriodSeconds|securityContext)",
    r"\.spec\.serviceAccount",  # the deprecated alias, set to serviceAccountName
    r"\.spec\.(initContainers|containers)\[\d+\]\.(terminationMessagePath|terminationMessagePolicy)",
    r"\.spec\.(initContainers|containers)\[\d+\]\.(imagePullPolicy|resources)",
    r"\.spec\.(initContainers|containers)\[\d+\]\.env\[\d+\]\.valueFrom\.fieldRef\.apiVersion",
    r"\.spec\.(initContainers|containers)\[\d+\]\.ports\[\d+\]\.protocol",
    r"\.spec\.volumes\[\d+\]\.(configMap|secret|projected|downwardAPI)\.defaultMode",
    r"\.spec\.volumes\[\d+\]\.downwardAPI\.items\[\d+\]\.fieldRef\.apiVersion",
)
_DEFAULTS = re.compile("|".join(f"(?:{p})$" for p in SERVER_DEFAULTS))
# Tolerations DefaultTolerationSeconds adds to a pod that has none for these taints.
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
SERVICE_ACCOUNT_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def differences(expected: Mapping[str, Any], created: Mapping[str, Any]) -> list[str]:
    """Where the created pod differs from `expected`, apart from `SERVER_DEFAULTS`, the token
    volume and its mounts (appended by the ServiceAccount admission), the default tolerations,
    requests defaulted to the limits, and quantities written in another canonical form."""
    return list(_diff(expected, created, ""))


def _diff(expected: Any, created: Any, path: str) -> Iterator[str]:
    if isinstance(expected, dict) and isinstance(created, dict):
        for key in sorted(set(expected) | set(created)):
            where = f"{path}.{key}"
            if key not in created:
                yield f"{where}: missing on the server"
            elif key not in expected:
                value = created[key]
                added_items = isinstance(value, list) and all(_server_item(where, i) for i in value)
                if not _DEFAULTS.match(where) and not added_items:
                    yield f"{where}: added by the server: {value!r}"
            elif where.endswith(".resources") and isinstance(created[key], dict):
                yield from _resources(expected[key], created[key], where)
            else:
                yield from _diff(expected[key], created[key], where)
    elif isinstance(expected, list) and isinstance(created, list):
        # The ServiceAccount admission runs before the mutating policy: its items may come first.
        created = [item for item in created if not _server_item(path, item)]
        for index, item in enumerate(created):
            where = f"{path}[{index}]"
            if index < len(expected):
                yield from _diff(expected[index], item, where)
            else:
                yield f"{where}: added by the server: {item!r}"
        for index in range(len(created), len(expected)):
            yield f"{path}[{index}]: missing on the server"
    elif expected != created and not _same_quantity(expected, created):
        yield f"{path}: {expected!r} became {created!r}"


def _server_item(path: str, item: Any) -> bool:
    """A list item the server adds: the token volume and its mounts, default tolerations."""
    if not isinstance(item, dict):
        return False
    if path == ".spec.volumes":
        return bool(SERVICE_ACCOUNT_VOLUME.match(item.get("name", ""))) and "projected" in item
    if path.endswith(".volumeMounts"):
        return (
            bool(SERVICE_ACCOUNT_VOLUME.match(item.get("name", "")))
            and item.get("mountPath") == SERVICE_ACCOUNT_MOUNT
            and item.get("readOnly") is True
        )
    if path == ".spec.tolerations":
        return item.get("key") in DEFAULT_TOLERATIONS and item.get("effect") == "NoExecute"
    return False


def _resources(
    expected: Mapping[str, Any], created: Mapping[str, Any], where: str
) -> Iterator[str]:
    """Requests the server defaults to the limits are not differences; anything else (claims
    included) is."""
    limits = dict(expected.get("limits", {}))
    requests = {**limits, **dict(expected.get("requests", {}))}
    wanted = {**expected, "limits": limits, "requests": requests}
    for part in sorted(set(created) | {k for k, v in wanted.items() if v}):
        yield from _diff(wanted.get(part, {}), created.get(part, {}), f"{where}.{part}")


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (ValueError, TypeError):
        return False
