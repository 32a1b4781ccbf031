"""The bundle's part for multi-node training (docs/trainer.md): TrainJob policies, node IDs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.bundle.validating import API_VERSION, REASON, policy_binding
from secureml.core import contract
from secureml.core.contract import RUNNER_NAME
from secureml.profile.model import TenantProfile
from secureml.profile.spiffe import spiffe_id_template
from secureml.rules.cel.text import quote

if TYPE_CHECKING:
    from secureml.trainer.rules import Validation

TRAINJOB_POLICY = "validate-trainjobs"
NETPOL_POLICY = "validate-trainer-netpol"
SPIFFE_NODES = "trainer-nodes"


def _policy(
    profile: TenantProfile,
    suffix: str,
    group: str,
    version: str,
    resource: str,
    validations: list[Validation],
    conditions: list[Manifest] | None = None,
) -> Manifest:
    spec: Manifest = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "namespaceSelector": namespace_selector(profile),
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [resource],
                }
            ],
        },
    }
    if conditions:
        spec["matchConditions"] = conditions
    spec["validations"] = [
        {"expression": v.expression, "message": f"{v.id}: {v.message}", "reason": REASON}
        for v in validations
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": cluster_name(profile, suffix), "labels": tenant_labels(profile)},
        "spec": spec,
    }


def runner_username(profile: TenantProfile) -> str:
    return f"system:serviceaccount:{profile.spec.namespace}:{RUNNER_NAME}"


def render_policies(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    # the rules import the rule package (and its CEL engine) only where a bundle needs them
    from secureml.trainer.rules import network_policy_validations, trainjob_validations

    if profile.spec.trainer is None:
        return []
    group, version = contract.TRAINER_API_VERSION.split("/")
    by_runner = {
        "name": "secureml-runner",
        "expression": f"request.userInfo.username == {quote(runner_username(profile))}",
    }
    return [
        _policy(
            profile, TRAINJOB_POLICY, group, version, "trainjobs", trainjob_validations(profile)
        ),
        _policy(
            profile,
            NETPOL_POLICY,
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            network_policy_validations(),
            [by_runner],
        ),
    ]


def render_bindings(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if profile.spec.trainer is None:
        return []
    return [
        policy_binding(profile, cluster_name(profile, suffix))
        for suffix in (TRAINJOB_POLICY, NETPOL_POLICY)
    ]


def node_spiffe_id_template(profile: TenantProfile) -> str:
    index = f'{{{{ index .PodMeta.Labels "{contract.LABEL_JOB_COMPLETION_INDEX}" }}}}'
    return f"{spiffe_id_template(profile)}{contract.SPIFFE_NODE_SEGMENT}{index}"


def render_spiffe(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if profile.spec.trainer is None or not profile.spec.identity.required:
        return []
    return [
        {
            "apiVersion": "spire.spiffe.io/v1alpha1",
            "kind": "ClusterSPIFFEID",
            "metadata": {
                "name": cluster_name(profile, SPIFFE_NODES),
                "labels": tenant_labels(profile),
            },
            "spec": {
                "spiffeIDTemplate": node_spiffe_id_template(profile),
                "namespaceSelector": namespace_selector(profile),
                "podSelector": {
                    "matchLabels": {
                        contract.LABEL_TENANT: profile.metadata.name,
                        contract.LABEL_TRAINER_NODE: "true",
                    },
                    "matchExpressions": [
                        {"key": contract.LABEL_PIPELINE, "operator": "Exists"},
                        {"key": contract.LABEL_STEP, "operator": "Exists"},
                        {"key": contract.LABEL_JOB_COMPLETION_INDEX, "operator": "Exists"},
                    ],
                },
            },
        }
    ]
