"""The pipeline runner's ServiceAccount and a least-privilege Role."""

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
