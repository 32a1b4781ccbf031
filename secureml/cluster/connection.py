"""One API server connection, opened from a kubeconfig, with failures a person can act on."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.core.errors import ClusterError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REQUEST_TIMEOUT_S = 30
APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_KUBECONFIG = Path("~/.kube/config")


class ServerRefusedError(Exception):
    """The API server answered with an error Status (`status` is its JSON body, or a stand-in)."""

    def __init__(self, code: int, status: Mapping[str, Any]) -> None:
        self.code = code
        self.status = dict(status)
        super().__init__(f"{code}: {self.message}")

    @property
    def message(self) -> str:
        return str(self.status.get("message") or f"HTTP {self.code}")

    @property
    def reason(self) -> str:
        return str(self.status.get("reason") or "")

    @property
    def causes(self) -> list[dict[str, Any]]:
        details = self.status.get("details") or {}
        return [cause for cause in details.get("causes") or [] if isinstance(cause, dict)]


@dataclass(frozen=True)
class Resource:
    """A kind the server serves: its plural name in URLs and whether it is namespaced."""

    name: str
    namespaced: bool


@dataclass
class Response:
    """A parsed JSON response and the server's `Warning` headers."""

    code: int
    body: dict[str, Any]
    warnings: list[str]


@dataclass
class Cluster:
    """An API server reached through a kubeconfig: `source` says which, for every message."""

    api: ApiClient
    server: str
    source: str
    namespace: str | None = None
    _discovery: dict[str, dict[str, Resource] | None] = field(default_factory=dict)

    def describe(self) -> str:
        return f"the API server {self.server} ({self.source})"

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Response:
        """One request; error statuses raise `ServerRefusedError`, connection failures `ClusterError`."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            raw = self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except ApiException as err:
            refusal = ServerRefusedError(err.status or 0, _status_body(err.body, err.reason))
            if refusal.code == 0:  # the client's own failure: TLS, or a request it cannot send
                raise ClusterError(
                    f"cannot reach {self.describe()}",
                    why=refusal.message,
                    fix="check the server address and certificate authority of the kubeconfig",
                ) from None
            if refusal.code == 401:
                raise ClusterError(
                    f"{self.describe()} refused the credentials (401 Unauthorized)",
                    why=refusal.message,
                    fix="check the user of the kubeconfig context (token, client certificate)",
                ) from None
            raise refusal from None
        except HTTPError as err:
            raise ClusterError(
                f"cannot reach {self.describe()}",
                why=_reason(err),
                fix="check that the cluster is up and that the kubeconfig names its address "
                "(--kubeconfig, --context)",
            ) from None
        text = raw.data.decode("utf-8") if raw.data else ""
        try:
            parsed = json.loads(text) if text else {}
        except json.JSONDecodeError:
            raise ClusterError(
                f"{self.describe()} answered {method} {path} with something that is not JSON",
                why=text[:200],
                fix="check that the kubeconfig points at a Kubernetes API server",
            ) from None
        warnings = list(raw.headers.getlist("Warning"))
        return Response(raw.status, parsed if isinstance(parsed, dict) else {}, warnings)

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path).body

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ServerRefusedError as refusal:
            if refusal.code == 404:
                return False
            raise self.unusable(f"GET {path}", refusal) from None
        return True

    def unusable(self, action: str, refusal: ServerRefusedError) -> ClusterError:
        """A refusal of a read the tool needs (discovery, version): the cluster cannot be used."""
        return ClusterError(
            f"{self.describe()} refused {action} ({refusal.code} {refusal.reason})",
            why=refusal.message,
            fix="use a kubeconfig user that may read the API (discovery, namespaces, the objects "
            "of the bundle)",
        )

    def served(self, api_version: str) -> dict[str, Resource] | None:
        """Kind -> resource of `api_version` ("v1", "group/version"); None when not served."""
        if api_version not in self._discovery:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                listing = self.get(path)
            except ServerRefusedError as refusal:
                if refusal.code != 404:
                    raise self.unusable(f"discovery of {api_version}", refusal) from None
                self._discovery[api_version] = None
            else:
                self._discovery[api_version] = {
                    entry["kind"]: Resource(entry["name"], bool(entry.get("namespaced")))
                    for entry in listing.get("resources") or []
                    if "/" not in entry.get("name", "/")
                }
        return self._discovery[api_version]

    def version(self) -> str:
        """The server's `gitVersion`, e.g. v1.36.3 ("unknown" when /version says nothing)."""
        try:
            return str(self.get("/version").get("gitVersion") or "unknown")
        except ServerRefusedError as refusal:
            raise self.unusable("GET /version", refusal) from None

    def object_path(self, api_version: str, resource: Resource, namespace: str | None) -> str:
        """The collection URL of `resource` (in `namespace` when it is namespaced)."""
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if resource.namespaced:
            return f"{base}/namespaces/{namespace}/{resource.name}"
        return f"{base}/{resource.name}"


def connect(kubeconfig: Path | None = None, context: str | None = None) -> Cluster:
    """Open the cluster named by `kubeconfig`/`context` (kubectl's defaults when None)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    files = _kubeconfig_files(kubeconfig)
    namespace: str | None = None
    if files is None:
        if context is not None:
            raise ClusterError(
                f"--context {context} needs a kubeconfig, and none was found",
                why=f"no --kubeconfig, no $KUBECONFIG and no {DEFAULT_KUBECONFIG}",
                fix="give --kubeconfig FILE",
            )
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as err:
            raise ClusterError(
                "no kubeconfig found and not running in a pod",
                why=f"no --kubeconfig, no $KUBECONFIG, no {DEFAULT_KUBECONFIG}; in-cluster: {err}",
                fix="give --kubeconfig FILE (and --context NAME)",
            ) from None
        source = "in-cluster service account"
        namespace = _in_cluster_namespace()
    else:
        source = f"kubeconfig {files}" + (f", context {context}" if context else "")
        try:
            config.load_kube_config(
                config_file=files,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
            namespace = _context_namespace(files, context)
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as err:
            raise ClusterError(
                f"cannot use {source}",
                why=str(err) or type(err).__name__,
                fix="check the file and the context name (`kubectl config get-contexts`)",
            ) from None
    if not configuration.verify_ssl:
        # kubectl says nothing per request for insecure-skip-tls-verify; say it once, in `source`.
        import warnings

        from urllib3.exceptions import InsecureRequestWarning

        warnings.filterwarnings("ignore", category=InsecureRequestWarning)
        source += ", TLS not verified"
    return Cluster(client.ApiClient(configuration), configuration.host, source, namespace)


def _kubeconfig_files(kubeconfig: Path | None) -> str | None:
    """The kubeconfig file list to load (kubectl's order), or None for in-cluster."""
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise ClusterError(
                f"kubeconfig {kubeconfig}: no such file",
                fix="give the path of a kubeconfig file (--kubeconfig)",
            )
        return str(kubeconfig)
    from_env = os.environ.get("KUBECONFIG", "")
    if any(Path(part).expanduser().is_file() for part in from_env.split(os.pathsep) if part):
        return from_env
    default = DEFAULT_KUBECONFIG.expanduser()
    return str(default) if default.is_file() else None


def _context_namespace(files: str, context: str | None) -> str | None:
    from kubernetes import config

    contexts, active = config.list_kube_config_contexts(config_file=files)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


def _in_cluster_namespace() -> str | None:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _status_body(body: Any, reason: Any) -> dict[str, Any]:
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            return {"message": body.strip()[:500], "reason": str(reason or "")}
        if isinstance(parsed, dict):
            return parsed
    return {"message": str(reason or "no message"), "reason": str(reason or "")}


def _reason(err: Exception) -> str:
    """The innermost reason of a urllib3 failure (connection refused, TLS, timeout)."""
    inner = getattr(err, "reason", None)
    return str(inner or err)
