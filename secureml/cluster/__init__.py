"""secureml against a real cluster: apply a tenant bundle, judge pods by the API server itself.

Public API::

    connect(kubeconfig=None, context=None) -> Cluster
        The API server of a kubeconfig (kubectl's defaults; in-cluster when there is none).
    apply_bundle(manifests, kubeconfig=None, context=None, dry_run=False, *, force_conflicts=False,
                 cluster=None, typecheck_timeout_s=10.0) -> ApplyResult
        Server-side apply (field manager `secureml`) after checking every kind is served.
    check_pods_on_server(pods, namespace=None, *, kubeconfig=None, context=None, cluster=None)
        -> list[PodVerdict]
        A server dry-run create of each pod; verdicts shaped as the offline check's.

Failures are secureml errors: `ClusterError` (exit 2) when the cluster cannot be used (kubeconfig,
connection, a missing CRD or API), `BundleRefusedError` (exit 1) naming each refused object, its
fields and the server's message. The `kubernetes` client is imported on first use only.
"""

from secureml.cluster.apply import ApplyResult, BundleRefusedError, apply_bundle
from secureml.cluster.connection import Cluster, connect
from secureml.cluster.pods import check_pods_on_server

__all__ = [
    "ApplyResult",
    "BundleRefusedError",
    "Cluster",
    "apply_bundle",
    "check_pods_on_server",
    "connect",
]
