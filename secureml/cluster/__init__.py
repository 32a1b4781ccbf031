"""secureml against a real cluster: connect, and apply a tenant bundle with server-side apply.

Pods judged by the API server itself are `secureml.admission.server`'s.

Public API::

    connect(kubeconfig=None, context=None) -> Cluster
        The API server of a kubeconfig (kubectl's defaults; in-cluster when there is none).
    apply_bundle(manifests, kubeconfig=None, context=None, dry_run=False, *, force_conflicts=False,
                 cluster=None, typecheck_timeout_s=10.0) -> ApplyResult
        Server-side apply (field manager `secureml`) after checking every kind is served.

Failures are secureml errors: `ClusterError` (exit 2) when the cluster cannot be used (kubeconfig,
connection, a missing CRD or API), `BundleRefusedError` (exit 1) naming each refused object, its
fields and the server's message. The `kubernetes` client is imported on first use only.
"""

from secureml.cluster.apply import ApplyResult, BundleRefusedError, apply_bundle
from secureml.cluster.connection import Cluster, connect

__all__ = [
    "ApplyResult",
    "BundleRefusedError",
    "Cluster",
    "apply_bundle",
    "connect",
]
