"""The cluster components secureml's controls rely on: each one present or not, and what to do."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from secureml.bundle.dra import DRIVER as DRA_DRIVER
from secureml.bundle.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from secureml.doctor.check import Check, Status
from secureml.doctor.cluster_read import Reader
from secureml.profile.model import TenantProfile

SPIFFE_CSI_DRIVER = "csi.spiffe.io"
DEVICE_PLUGIN_NAMES = (
    "nvidia-device-plugin-daemonset",
    "nvidia-device-plugin",
    "nvidia-device-plugin-ds",
)
DEVICE_PLUGIN_LABELS = {
    "app.kubernetes.io/name": "nvidia-device-plugin",
    "app": "nvidia-device-plugin-daemonset",
}
DCGM_NAMES = ("nvidia-dcgm-exporter", "dcgm-exporter")
DCGM_LABELS = {"app.kubernetes.io/name": "dcgm-exporter", "app": "nvidia-dcgm-exporter"}
SPIRE_SERVER = "spire-server"
SPIRE_AGENT = "spire-agent"
POLICY_CONTROLLER_WEBHOOK = "policy.sigstore.dev"
POLICY_CONTROLLER_CONFIG = "config-policy-controller"
# spire-controller-manager's ClusterSPIFFEID status.stats counters that mean a pod got no entry.
SPIFFE_ID_FAULTS = ("podEntryRenderFailures", "entryFailures", "entriesMasked")


@dataclass
class Needs:
    """Which tenants need each component (`known` is False when no profile was given)."""

    known: bool
    image_policy: str
    identity: list[str] = field(default_factory=list)
    resources: dict[str, list[str]] = field(default_factory=dict)
    device_classes: dict[str, list[str]] = field(default_factory=dict)
    signatures: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)

    def add(self, profile: TenantProfile, device_classes: list[str]) -> None:
        from secureml.gpu.placement import allowed_accelerators

        name = profile.metadata.name
        if profile.spec.identity.required:
            self.identity.append(name)
        for resource in sorted(allowed_accelerators(profile)):
            self.resources.setdefault(resource, []).append(name)
        for device_class in device_classes:
            self.device_classes.setdefault(device_class, []).append(name)
        if profile.spec.images.signatures.required:
            self.signatures.append(name)
        if profile.spec.monitoring.alerts:
            self.alerts.append(name)


def component_checks(reader: Reader, needs: Needs) -> list[Check]:
    daemonsets = reader.items("apps/v1", "DaemonSet") or []
    checks = [
        spiffe_csi_check(reader, needs),
        spire_server_check(reader, needs),
        spire_agent_check(daemonsets, needs),
        cluster_spiffe_id_check(reader, needs),
    ]
    if needs.resources or not needs.known:
        checks.append(device_plugin_check(daemonsets, needs))
        checks.append(gpu_resources_check(reader, needs))
    if needs.device_classes or not needs.known:
        checks.append(dra_check(reader, needs))
    if needs.image_policy == "kyverno":
        checks.append(kyverno_check(reader, needs))
    else:
        checks.append(policy_controller_check(reader, needs))
    checks.append(dcgm_check(daemonsets, needs))
    return checks


def _absent(needed_by: list[str], needs: Needs, *, when_needed: Status = "fail") -> Status:
    """The status of a missing component: fail (or `when_needed`) when a tenant needs it."""
    if needed_by:
        return when_needed
    return "warn" if not needs.known else "pass"


def _who(needed_by: list[str], what: str) -> str:
    if needed_by:
        return f"; tenant(s) {', '.join(needed_by)} {what}"
    return ""


def _names(objects: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}".lstrip("/")
        for obj in objects
    )


def _matching(
    objects: list[dict[str, Any]], names: tuple[str, ...], labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Objects with one of `names` (or `<release>-<name>`) or one of the `labels` pairs."""
    found = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        own = meta.get("labels") or {}
        if any(name == n or name.endswith(f"-{n}") for n in names) or any(
            own.get(key) == value for key, value in labels.items()
        ):
            found.append(obj)
    return found


def _readiness(objects: list[dict[str, Any]]) -> list[str]:
    """`ns/name: N of M ready` for each workload that is not fully ready."""
    lagging = []
    for obj in objects:
        status = obj.get("status") or {}
        if obj.get("kind") == "DaemonSet":
            wanted, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
        else:
            wanted = (obj.get("spec") or {}).get("replicas", 1)
            ready = status.get("readyReplicas", 0)
        if wanted == 0:
            lagging.append(f"{_names([obj])}: scheduled to no node")
        elif ready < wanted:
            lagging.append(f"{_names([obj])}: {ready} of {wanted} ready")
    return lagging


def _describe(objects: list[dict[str, Any]]) -> str:
    """The kubectl commands that show why the workloads' pods do not run."""
    return "; ".join(
        f"kubectl -n {obj['metadata'].get('namespace', 'default')} describe "
        f"{str(obj.get('kind', '')).lower()} {obj['metadata']['name']}"
        for obj in objects
    )


def _workload_check(
    name: str,
    title: str,
    found: list[dict[str, Any]],
    needed_by: list[str],
    needs: Needs,
    *,
    absent_seen: str,
    fix: str,
    when_needed: Status = "fail",
) -> Check:
    if not found:
        status = _absent(needed_by, needs, when_needed=when_needed)
        return Check(
            name,
            title,
            status,
            absent_seen + _who(needed_by, "need it"),
            fix if status != "pass" else "",
        )
    lagging = _readiness(found)
    if lagging:
        return Check(
            name,
            title,
            "warn" if not needed_by or when_needed == "warn" else "fail",
            f"found {_names(found)}, not ready: {'; '.join(lagging)}",
            f"see why its pods do not run (their events and logs): {_describe(found)}; a "
            "DaemonSet scheduled to no node has a nodeSelector or tolerations the GPU nodes do "
            "not match",
        )
    return Check(name, title, "pass", f"{_names(found)}: ready")


# --- SPIFFE / SPIRE -------------------------------------------------------------------------------


def spiffe_csi_check(reader: Reader, needs: Needs) -> Check:
    name, title = "spiffe.csi-driver", f"SPIFFE CSI driver ({SPIFFE_CSI_DRIVER})"
    driver = reader.get(f"/apis/storage.k8s.io/v1/csidrivers/{SPIFFE_CSI_DRIVER}")
    if driver is None:
        status = _absent(needs.identity, needs)
        return Check(
            name,
            title,
            status,
            f"no CSIDriver {SPIFFE_CSI_DRIVER}: a step pod's SPIFFE socket volume cannot mount, "
            "the pod stays ContainerCreating" + _who(needs.identity, "require identity"),
            "install the SPIFFE CSI driver (Helm chart spiffe/spire, spiffe-csi-driver enabled, "
            "or github.com/spiffe/spiffe-csi)"
            if status != "pass"
            else "",
        )
    modes = (driver.get("spec") or {}).get("volumeLifecycleModes") or ["Persistent"]
    if "Ephemeral" not in modes:
        return Check(
            name,
            title,
            "fail" if needs.identity else "warn",
            f"CSIDriver {SPIFFE_CSI_DRIVER} volumeLifecycleModes {modes}: the step pods' inline "
            "volume needs Ephemeral",
            "reinstall the SPIFFE CSI driver from its chart (its CSIDriver declares Ephemeral)",
        )
    return Check(name, title, "pass", f"CSIDriver {SPIFFE_CSI_DRIVER} (Ephemeral volumes)")


def spire_server_check(reader: Reader, needs: Needs) -> Check:
    workloads = [
        {**obj, "kind": kind}
        for kind in ("StatefulSet", "Deployment")
        for obj in reader.items("apps/v1", kind, {"fieldSelector": f"metadata.name={SPIRE_SERVER}"})
        or []
    ]
    return _workload_check(
        "spire.server",
        "SPIRE server",
        workloads,
        needs.identity,
        needs,
        absent_seen=f"no StatefulSet or Deployment named {SPIRE_SERVER}: no SVID is issued",
        fix="install SPIRE (Helm chart spiffe/spire: spire-server with its controller manager); "
        "its trust domain must be the profiles' spec.identity.trustDomain",
    )


def spire_agent_check(daemonsets: list[dict[str, Any]], needs: Needs) -> Check:
    found = [{**obj, "kind": "DaemonSet"} for obj in _matching(daemonsets, (SPIRE_AGENT,), {})]
    return _workload_check(
        "spire.agent",
        "SPIRE agent on the nodes",
        found,
        needs.identity,
        needs,
        absent_seen=f"no DaemonSet named {SPIRE_AGENT}: no node serves the Workload API",
        fix="install SPIRE's agent DaemonSet (Helm chart spiffe/spire) on the GPU nodes",
    )


def cluster_spiffe_id_check(reader: Reader, needs: Needs) -> Check:
    name, title = "spire.clusterspiffeid", "SPIRE controller manager's ClusterSPIFFEID"
    objects = reader.items("spire.spiffe.io/v1alpha1", "ClusterSPIFFEID")
    if objects is None:
        status = _absent(needs.identity, needs)
        return Check(
            name,
            title,
            status,
            "the ClusterSPIFFEID CRD (spire.spiffe.io/v1alpha1) is not installed: the tenants' "
            "step identities cannot be registered" + _who(needs.identity, "require identity"),
            "install SPIRE with spire-controller-manager (the spire-crds Helm chart has the CRD), "
            "or set spec.identity.required: false in the profile"
            if status != "pass"
            else "",
        )
    ours = sorted(
        obj["metadata"]["name"]
        for obj in objects
        if ((obj["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "secureml")
    )
    failing = []
    for obj in objects:
        stats = (obj.get("status") or {}).get("stats") or {}
        faults = [f"{key} {stats[key]}" for key in SPIFFE_ID_FAULTS if stats.get(key, 0) > 0]
        if obj["metadata"]["name"] in ours and faults:
            failing.append(f"{obj['metadata']['name']}: {', '.join(faults)}")
    if failing:
        return Check(
            name,
            title,
            "fail" if needs.identity else "warn",
            "spire-controller-manager could not register every step's entry: " + "; ".join(failing),
            "read spire-controller-manager's log: podEntryRenderFailures is a template the pod "
            "labels do not fill, entryFailures an entry the SPIRE server refused (a trust domain "
            "other than the server's), entriesMasked another ClusterSPIFFEID selecting the same pods",
        )
    return Check(
        name,
        title,
        "pass",
        f"CRD served; {len(objects)} ClusterSPIFFEID(s), secureml's: {', '.join(ours) or 'none'}",
    )


# --- GPUs -----------------------------------------------------------------------------------------


def device_plugin_check(daemonsets: list[dict[str, Any]], needs: Needs) -> Check:
    found = [
        {**obj, "kind": "DaemonSet"}
        for obj in _matching(daemonsets, DEVICE_PLUGIN_NAMES, DEVICE_PLUGIN_LABELS)
    ]
    tenants = sorted({t for names in needs.resources.values() for t in names})
    return _workload_check(
        "gpu.device-plugin",
        "NVIDIA device plugin",
        found,
        tenants,
        needs,
        absent_seen="no NVIDIA device plugin DaemonSet (names "
        f"{', '.join(DEVICE_PLUGIN_NAMES)}, or label app.kubernetes.io/name=nvidia-device-plugin): "
        "no node advertises GPUs, GPU steps stay Pending",
        fix="install the NVIDIA GPU Operator or the nvidia-device-plugin Helm chart (with the "
        "MIG strategy and time-slicing config of the profiles)",
    )


def _resource_fix(resource: str) -> str:
    from secureml.nvidia.catalogue import MIG_RESOURCE_PREFIX, RESOURCE_GPU

    if resource.startswith(MIG_RESOURCE_PREFIX):
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
        return (
            f"{resource}: run the device plugin with MIG strategy mixed and partition the GPUs "
            f"with {profile} instances (GPU Operator mig.config / nvidia-mig-parted)"
        )
    if resource == RESOURCE_GPU:
        return f"{resource}: run the device plugin on the whole-GPU pool's nodes"
    return (
        f"{resource}: give the device plugin a time-slicing config (sharing.timeSlicing) with "
        f"renameByDefault: true, so replicas are advertised as {resource} (or set the profile's "
        "gpu.timeSlice.resourceName to the name the nodes advertise)"
    )


def gpu_resources_check(reader: Reader, needs: Needs) -> Check:
    name, title = "gpu.resources", "GPU resource names advertised by the nodes"
    nodes = reader.items("v1", "Node") or []
    advertised: dict[str, int] = {}
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, amount in allocatable.items():
            if resource.startswith("nvidia.com/") and str(amount) not in ("0", ""):
                advertised[resource] = advertised.get(resource, 0) + 1
    listing = ", ".join(f"{r} ({n} node(s))" for r, n in sorted(advertised.items())) or "none"
    missing = {r: t for r, t in needs.resources.items() if r not in advertised}
    if missing:
        seen = "; ".join(f"{r} (tenant(s) {', '.join(t)})" for r, t in sorted(missing.items()))
        return Check(
            name,
            title,
            "fail",
            f"no node advertises {seen}; the {len(nodes)} node(s) advertise: {listing}",
            "\n".join(_resource_fix(r) for r in sorted(missing)),
        )
    if not advertised:
        status: Status = "warn" if not needs.known else "pass"
        return Check(
            name,
            title,
            status,
            f"no node of {len(nodes)} advertises an nvidia.com resource",
            ""
            if status == "pass"
            else "install the NVIDIA device plugin on the GPU nodes "
            "(GPU Operator or its Helm chart), or use the DRA driver (gpu.backend: dra)",
        )
    return Check(name, title, "pass", f"advertised: {listing}")


def dra_check(reader: Reader, needs: Needs) -> Check:
    name, title = "gpu.dra-driver", f"NVIDIA DRA driver ({DRA_DRIVER})"
    classes = reader.items("resource.k8s.io/v1", "DeviceClass")
    if classes is None:
        status = _absent(sorted({t for ts in needs.device_classes.values() for t in ts}), needs)
        return Check(
            name,
            title,
            status,
            "the server does not serve resource.k8s.io/v1 (DeviceClass): no DRA",
            "DRA is GA from Kubernetes 1.34: upgrade, or use the device-plugin backend"
            if status != "pass"
            else "",
        )
    present = {obj["metadata"]["name"] for obj in classes}
    missing = {c: t for c, t in needs.device_classes.items() if c not in present}
    slices = [
        obj
        for obj in reader.items("resource.k8s.io/v1", "ResourceSlice") or []
        if (obj.get("spec") or {}).get("driver") == DRA_DRIVER
    ]
    fix = (
        "install NVIDIA's DRA driver (Helm chart nvidia/nvidia-dra-driver-gpu, with its GPU resources on) "
        "on the GPU nodes"
    )
    if missing:
        seen = "; ".join(f"{c} (tenant(s) {', '.join(t)})" for c, t in sorted(missing.items()))
        return Check(name, title, "fail", f"no DeviceClass {seen}", fix)
    if not needs.device_classes and not {GPU_DEVICE_CLASS, MIG_DEVICE_CLASS} & present:
        return Check(
            name,
            title,
            "warn",
            f"no DeviceClass {GPU_DEVICE_CLASS} or {MIG_DEVICE_CLASS}",
            f"for tenants on the dra backend: {fix}",
        )
    if not slices:
        return Check(
            name,
            title,
            "fail" if needs.device_classes else "warn",
            f"DeviceClasses {', '.join(sorted(present))}, but no node publishes a ResourceSlice "
            f"of {DRA_DRIVER}: claims stay unallocated",
            fix,
        )
    return Check(
        name,
        title,
        "pass",
        f"DeviceClasses {', '.join(sorted(present))}; {len(slices)} ResourceSlice(s) of "
        f"{DRA_DRIVER}",
    )


# --- image policy ---------------------------------------------------------------------------------


def _webhooks(reader: Reader, matches: Callable[[str, str], bool]) -> list[tuple[str, str, str]]:
    """(configuration kind/name, webhook name, failurePolicy) of the matching admission webhooks."""
    found = []
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for config in reader.items("admissionregistration.k8s.io/v1", kind) or []:
            config_name = config["metadata"]["name"]
            for hook in config.get("webhooks") or []:
                hook_name = str(hook.get("name") or "")
                if matches(config_name, hook_name):
                    found.append(
                        (f"{kind}/{config_name}", hook_name, hook.get("failurePolicy", "Fail"))
                    )
    return found


def _engine_check(
    name: str,
    title: str,
    reader: Reader,
    needs: Needs,
    *,
    api_version: str,
    kind: str,
    webhooks: list[tuple[str, str, str]],
    install: str,
    extra: list[str],
) -> Check:
    crd_served = reader.resource(api_version, kind) is not None
    required = needs.signatures
    if not crd_served or not webhooks:
        missing = []
        if not crd_served:
            missing.append(f"{kind} ({api_version}) is not served: the CRD is not installed")
        if not webhooks:
            missing.append("no admission webhook of it is registered: nothing checks signatures")
        status = _absent(required, needs)
        return Check(
            name,
            title,
            status,
            "; ".join(missing) + _who(required, "require signatures"),
            install if status != "pass" else "",
        )
    problems = extra
    if problems:
        return Check(
            name,
            title,
            "fail" if required else "warn",
            "; ".join(problems),
            "set what is named above in the engine's Helm values (webhook failurePolicy Fail, "
            "its settings), so the control fails closed",
        )
    hooks = ", ".join(sorted({where for where, _, _ in webhooks}))
    return Check(name, title, "pass", f"{kind} served; webhooks {hooks}")


def policy_controller_check(reader: Reader, needs: Needs) -> Check:
    extra: list[str] = []
    for config in (
        reader.items(
            "v1", "ConfigMap", {"fieldSelector": f"metadata.name={POLICY_CONTROLLER_CONFIG}"}
        )
        or []
    ):
        value = (config.get("data") or {}).get("no-match-policy", "deny")
        if value != "deny":
            extra.append(
                f"ConfigMap {_names([config])} no-match-policy: {value} (secureml needs deny: an "
                "image no ClusterImagePolicy names must be refused)"
            )
    webhooks = _webhooks(reader, lambda config, hook: hook.endswith(POLICY_CONTROLLER_WEBHOOK))
    open_hooks = [f"{hook} ({where})" for where, hook, policy in webhooks if policy != "Fail"]
    if open_hooks:
        extra.append(
            f"failurePolicy Ignore on {', '.join(open_hooks)}: an image is admitted unchecked "
            "while the webhook is down"
        )
    return _engine_check(
        "images.policy-controller",
        "Sigstore policy-controller (image signatures)",
        reader,
        needs,
        api_version="policy.sigstore.dev/v1beta1",
        kind="ClusterImagePolicy",
        webhooks=webhooks,
        install="install Sigstore's policy-controller (Helm chart sigstore/policy-controller, "
        "no-match-policy: deny), or render and apply for Kyverno (--image-policy kyverno)",
        extra=extra,
    )


def kyverno_check(reader: Reader, needs: Needs) -> Check:
    """Kyverno registers a `-fail` and an `-ignore` webhook per policy type and puts each policy
    behind the one of its failurePolicy; the bundle's ImageValidatingPolicy is `Fail`, so an
    `ivpol.*` webhook with failurePolicy Fail must be there once a tenant's policy is applied."""
    webhooks = _webhooks(reader, lambda config, hook: config.startswith("kyverno-"))
    extra = []
    closed = [
        hook for _, hook, policy in webhooks if hook.startswith("ivpol.") and policy == "Fail"
    ]
    if webhooks and needs.signatures and not closed:
        extra.append(
            "Kyverno registered no ImageValidatingPolicy webhook (ivpol.*) with failurePolicy "
            "Fail: the tenants' image policies are not called"
        )
    return _engine_check(
        "images.kyverno",
        "Kyverno (image signatures)",
        reader,
        needs,
        api_version="policies.kyverno.io/v1",
        kind="ImageValidatingPolicy",
        webhooks=webhooks,
        install="install Kyverno 1.15 or newer (Helm chart kyverno/kyverno), or render and apply "
        "for Sigstore's policy-controller (--image-policy policy-controller)",
        extra=extra,
    )


# --- monitoring -----------------------------------------------------------------------------------


def dcgm_check(daemonsets: list[dict[str, Any]], needs: Needs) -> Check:
    found = [{**obj, "kind": "DaemonSet"} for obj in _matching(daemonsets, DCGM_NAMES, DCGM_LABELS)]
    return _workload_check(
        "monitoring.dcgm-exporter",
        "dcgm-exporter (GPU metrics for the alerts)",
        found,
        needs.alerts,
        needs,
        absent_seen="no dcgm-exporter DaemonSet: the PrometheusRule alerts (Xid, PCIe replays, "
        "memory) have no metrics and never fire",
        fix="install dcgm-exporter (GPU Operator dcgmExporter.enabled, or Helm chart "
        "gpu-helm-charts/dcgm-exporter) with Kubernetes pod mapping, scraped with honorLabels",
        when_needed="warn",
    )
