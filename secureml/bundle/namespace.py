"""The tenant's Namespace: Pod Security `restricted`, pinned to the target Kubernetes version."""

from __future__ import annotations

from secureml.bundle.common import BundleOptions, Manifest, tenant_labels
from secureml.profile.model import TenantProfile

PSA_MODES = ("enforce", "audit", "warn")
# Labels the Kubeflow profile controller puts on profile namespaces (its namespace-labels.yaml)
# that secure steps need: the KFP profile controller syncs per-namespace KFP objects into
# namespaces labelled pipelines.kubeflow.org/enabled. Katib's metrics-collector injection and
# KServe are left out on purpose: both add containers the admission policies would refuse.
KUBEFLOW_NAMESPACE_LABELS = {
    "app.kubernetes.io/part-of": "kubeflow-profile",
    "pipelines.kubeflow.org/enabled": "true",
}
# policy-controller only checks namespaces that opt in.
SIGSTORE_INCLUDE_LABEL = "policy.sigstore.dev/include"


def render(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    labels = dict(tenant_labels(profile))
    for mode in PSA_MODES:
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = f"v{options.k8s_version}"
    labels.update(KUBEFLOW_NAMESPACE_LABELS)
    if options.image_policy == "policy-controller":
        labels[SIGSTORE_INCLUDE_LABEL] = "true"
    namespace: Manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        # The Kubeflow profile controller adopts an existing namespace only when its `owner`
        # annotation names the Profile's owner.
        "metadata": {
            "name": profile.spec.namespace,
            "labels": labels,
            "annotations": {"owner": profile.spec.owner.name},
        },
    }
    return [namespace]
