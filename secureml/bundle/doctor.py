"""The opt-in doctor DaemonSet: `secureml doctor node` on every node of the tenant's GPU pools.

Why it runs where it does and mounts what it mounts: docs/bundle.md ("The doctor DaemonSet").
"""

from __future__ import annotations

from secureml.bundle.common import MANAGED_BY, BundleOptions, Manifest, cluster_name, tenant_labels
from secureml.nvidia import catalogue as gpu_catalogue
from secureml.profile.model import DoctorSettings, TenantProfile

APP_LABEL = "app.kubernetes.io/name"
APP = "secureml-doctor"
HOST_ROOT = "/host"
PROFILE_DIR = "/etc/secureml/doctor"
PROFILE_KEY = "profile.yaml"
UID = 65532
# hostPath source -> mount path in the pod, all read-only (the module docstring says why).
HOST_PATHS = (
    ("proc-driver-nvidia", "/proc/driver/nvidia", f"{HOST_ROOT}/proc/driver/nvidia", ""),
    ("sys-module-nvidia", "/sys/module/nvidia", f"{HOST_ROOT}/sys/module/nvidia", ""),
    (
        "nvidia-container-runtime",
        "/etc/nvidia-container-runtime",
        f"{HOST_ROOT}/etc/nvidia-container-runtime",
        "",
    ),
    ("nvidia-devices-request", "/dev/null", "/var/run/nvidia-container-devices/all", "CharDevice"),
)


def profile_yaml(profile: TenantProfile) -> str:
    """The profile as YAML the doctor loads back (every field written, None left out)."""
    import yaml

    data = profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False)


def _name(profile: TenantProfile) -> str:
    return f"{APP}-{profile.metadata.name}"


def _meta(profile: TenantProfile, doctor: DoctorSettings) -> Manifest:
    return {
        "name": _name(profile),
        "namespace": doctor.namespace,
        "labels": {**tenant_labels(profile), APP_LABEL: APP},
    }


def node_terms(profile: TenantProfile) -> list[Manifest]:
    """Required node affinity terms (ORed): one per GPU pool of the profile, else GPU nodes."""
    gpu = profile.spec.gpu
    selectors: list[dict[str, list[str]]] = []
    if gpu.time_slice is not None:
        labels = {
            gpu_catalogue.LABEL_SHARING_STRATEGY: gpu_catalogue.SHARING_TIME_SLICING,
            **gpu.time_slice.node_selector,
        }
        selectors.append({k: [v] for k, v in labels.items()})
    if gpu.whole_gpu is not None and gpu.whole_gpu.node_selector:
        selectors.append({k: [v] for k, v in gpu.whole_gpu.node_selector.items()})
    if gpu.mig is not None and gpu.mig.allowed_profiles:
        if gpu.mig_strategy == "single":
            products = sorted(
                {
                    name
                    for p in gpu.mig.allowed_profiles
                    for name in gpu_catalogue.mig_product_names(p, list(gpu.models))
                }
            )
        else:
            products = sorted(
                {
                    product
                    for name in gpu.models
                    if (model := gpu_catalogue.MIG_CATALOGUE.get(name)) is not None
                    for product in model.products
                }
            )
        if products:
            selectors.append({gpu_catalogue.LABEL_GPU_PRODUCT: products})
    if not selectors:
        selectors.append({"nvidia.com/gpu.present": ["true"]})  # GPU Feature Discovery's label
    return [
        {
            "matchExpressions": [
                {"key": k, "operator": "In", "values": v} for k, v in sorted(selector.items())
            ]
        }
        for selector in selectors
    ]


def _container(profile: TenantProfile, doctor: DoctorSettings) -> Manifest:
    command = [
        "python3",
        "-m",
        "secureml",
        "doctor",
        "node",
        "--root",
        HOST_ROOT,
        "--profiles",
        f"{PROFILE_DIR}/{PROFILE_KEY}",
        "--node-name",
        "$(NODE_NAME)",
        "--interval",
        str(doctor.interval_seconds),
        "--format",
        "json",
    ]
    mounts = [
        {"name": name, "mountPath": path, "readOnly": True} for name, _, path, _ in HOST_PATHS
    ]
    mounts += [
        {"name": "profile", "mountPath": PROFILE_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    return {
        "name": "doctor",
        "image": doctor.image,
        "command": command,
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }


def _daemonset(profile: TenantProfile, doctor: DoctorSettings) -> Manifest:
    selector = {APP_LABEL: APP, "secureml.dev/tenant": profile.metadata.name}
    whole = profile.spec.gpu.whole_gpu
    tolerations = [t.model_dump(exclude_none=True) for t in (whole.tolerations if whole else [])]
    volumes: list[Manifest] = []
    for name, source, _, kind in HOST_PATHS:
        host: Manifest = {"path": source}
        if kind:
            host["type"] = kind
        volumes.append({"name": name, "hostPath": host})
    volumes += [
        {"name": "profile", "configMap": {"name": _name(profile)}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
    ]
    pod_spec: Manifest = {
        "serviceAccountName": _name(profile),
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": node_terms(profile)
                }
            }
        },
        "containers": [_container(profile, doctor)],
        "volumes": volumes,
    }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(profile, doctor),
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
        },
    }


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    """The doctor's namespace, account, node-reading role, profile and DaemonSet; [] unless opted in."""
    doctor = profile.spec.monitoring.doctor
    if doctor is None:
        return []
    role = cluster_name(profile, "doctor")
    account = {"kind": "ServiceAccount", "name": _name(profile), "namespace": doctor.namespace}
    # hostPath volumes are beyond even Pod Security baseline: the platform namespace is privileged.
    labels = {**MANAGED_BY, "pod-security.kubernetes.io/enforce": "privileged"}
    return [
        # Shared by every tenant's doctor: no tenant label, the same object in each bundle.
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": doctor.namespace, "labels": labels},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(profile, doctor)},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(profile, doctor),
            "data": {PROFILE_KEY: profile_yaml(profile)},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role, "labels": tenant_labels(profile)},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role, "labels": tenant_labels(profile)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [account],
        },
        _daemonset(profile, doctor),
    ]
