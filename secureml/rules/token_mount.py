"""The one mount the API server adds to every container: the service account's token."""

from __future__ import annotations

from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import quote

# Checked on kube-apiserver 1.36.3 (tests/cluster): without this
# allowance every step pod is refused on a real cluster. Only that shape passes: read-only, no
# subPath, a projected volume of a service-account token, the cluster CA ConfigMap and downward-API
# items, nothing else.
SERVICE_ACCOUNT_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_TOKEN_MOUNT = (
    f"(m.name.startsWith('kube-api-access-') && m.mountPath == {quote(SERVICE_ACCOUNT_TOKEN_DIR)} && "
    "!has(m.subPath) && !has(m.subPathExpr) && has(m.readOnly) && m.readOnly == true && "
    f"has({SPEC}.volumes) && {SPEC}.volumes.exists(v, v.name == m.name && has(v.projected) && "
    "has(v.projected.sources) && v.projected.sources.all(s, has(s.serviceAccountToken) || "
    "(has(s.configMap) && s.configMap.name == 'kube-root-ca.crt') || has(s.downwardAPI))))"
)
