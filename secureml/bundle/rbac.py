"""The pipeline runner's ServiceAccount and a least-privilege Role.

KFP runs a pipeline's pods (driver, executor) under one service account. What they need in the
tenant namespace: Argo's executor reports step results (`workflowtaskresults`), the KFP launcher
and driver read pods, their logs and the `kfp-launcher` ConfigMap, and read the object-store
credentials Secret. Nothing else: no pods/exec, attach or port-forward, no changing pods, no
ephemeral containers, no writing ConfigMaps or Secrets, no creating workloads.

Where the profile allows multi-node training (`spec.trainer`, docs/trainer.md), a trainer step's
pod creates its TrainJob, watches and deletes it, and creates the job's own NetworkPolicy: the
Role grants exactly that (`TRAINER_RULES`); the bundle's admission policies judge what it creates.
"""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, metadata
from secureml.core.contract import RUNNER_NAME
from secureml.profile.model import TenantProfile

KFP_LAUNCHER_CONFIGMAP = "kfp-launcher"
OBJECT_STORE_SECRET = "mlpipeline-minio-artifact"

RUNNER_RULES: tuple[Manifest, ...] = (
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [KFP_LAUNCHER_CONFIGMAP],
        "verbs": ["get"],
    },
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": [OBJECT_STORE_SECRET],
        "verbs": ["get"],
    },
    {
        "apiGroups": ["argoproj.io"],
        "resources": ["workflowtaskresults"],
        "verbs": ["create", "patch"],
    },
)


TRAINER_RULES: tuple[Manifest, ...] = (
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]},
)


def runner_rules(profile: TenantProfile) -> list[Manifest]:
    """The runner's Role rules for `profile`."""
    extra = TRAINER_RULES if profile.spec.trainer is not None else ()
    return [dict(rule) for rule in (*RUNNER_RULES, *extra)]


def render_service_account(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(profile, RUNNER_NAME),
        }
    ]


def render_role(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(profile, RUNNER_NAME),
            "rules": runner_rules(profile),
        }
    ]


def render_role_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(profile, RUNNER_NAME),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": RUNNER_NAME,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": RUNNER_NAME, "namespace": profile.spec.namespace}
            ],
        }
    ]
