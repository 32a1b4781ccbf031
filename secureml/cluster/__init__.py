"""secureml against a real cluster: connect, and apply a tenant bundle with server-side apply.

The `kubernetes` client is imported on first use only.
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
