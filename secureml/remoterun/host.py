"""The KFP server behind `--host`: its URL, its health, runs created through `kfp.Client`."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from secureml.core import contract
from secureml.core.errors import ClusterError, InputError, NetworkError

HEALTHZ = "/apis/v2beta1/healthz"
FIX_HOST = (
    "give the KFP endpoint kfp.Client takes: the KFP UI or the ml-pipeline service, e.g. "
    "--host http://localhost:8080 after `kubectl port-forward -n kubeflow svc/ml-pipeline-ui "
    "8080:80`"
)


@dataclass(frozen=True)
class Host:
    """A KFP server that answered its health check."""

    url: str  # scheme://host[:port][/prefix], no trailing slash
    multi_user: bool
    timeout: float  # seconds for each request made outside kfp.Client

    def run_url(self, run_id: str) -> str:
        """Where the KFP UI shows the run, its graph and each step's logs."""
        return f"{self.url}/#/runs/details/{run_id}"


def parse_url(url: str) -> str:
    """`url` as a base URL, or an InputError that says what is wrong with it."""
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InputError(
            f"--host {url!r} is not an http:// or https:// URL with a host name",
            fix=FIX_HOST,
        )
    if parsed.query or parsed.fragment:
        raise InputError(
            f"--host {url!r} has a query or fragment",
            why="it is the base URL KFP's /apis paths are added to",
            fix=FIX_HOST,
        )
    try:
        parsed.port  # noqa: B018 (a bad port raises here)
    except ValueError as err:
        raise InputError(f"--host {url!r}: {err}", fix=FIX_HOST) from None
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))


def connect(url: str, *, timeout: float = 10.0) -> Host:
    """Check the URL and the server's health; NetworkError (exit 2) when nothing answers there,
    ClusterError when something answers that is not a KFP API server."""
    base = parse_url(url)
    try:
        response = requests.get(base + HEALTHZ, timeout=timeout)
    except requests.Timeout:
        raise NetworkError(
            f"the KFP server at {base} did not answer within {timeout:g} s",
            why=f"GET {HEALTHZ} timed out",
            fix=FIX_HOST,
        ) from None
    except requests.RequestException as err:
        raise NetworkError(
            f"cannot reach the KFP server at {base}", why=_reason(err), fix=FIX_HOST
        ) from None
    if response.status_code in (401, 403):
        raise ClusterError(
            f"the KFP server at {base} refused this client ({response.status_code})",
            why=response.text.strip()[:300],
            fix="sign in through the KFP UI's authentication and pass its cookie or token the way "
            "kfp.Client reads them (~/.config/kfp/context.json)",
        )
    try:
        health = response.json() if response.ok else None
    except ValueError:
        health = None
    if not isinstance(health, dict):
        raise ClusterError(
            f"{base} is not a Kubeflow Pipelines API server",
            why=f"GET {HEALTHZ} answered {response.status_code} "
            f"{response.headers.get('content-type', '')}".strip(),
            fix=FIX_HOST,
        )
    return Host(base, bool(health.get("multi_user")), timeout)


def _reason(err: requests.RequestException) -> str:
    """The innermost cause of a connection error, in one line (not urllib3's object reprs)."""
    cause: BaseException = err
    while cause.__context__ is not None and cause.__context__ is not cause:
        cause = cause.__context__
    text = str(cause) or type(cause).__name__
    return text.split("] ", 1)[-1] if text.startswith("[Errno") else text


class Submission:
    """One run created on `host` through kfp.Client, read back while it lasts."""

    def __init__(self, host: Host, namespace: str) -> None:
        import kfp

        self.host = host
        # single-user KFP has no namespaces: the client must send none
        self.namespace = namespace if host.multi_user else None
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")  # kfp.Client's FutureWarning on every construction
            self.client = kfp.Client(host=host.url, namespace=namespace or "kubeflow")
        self.run_id = ""

    def create(
        self, pipeline_yaml: str, *, run_name: str, experiment: str, arguments: dict[str, Any]
    ) -> str:
        """Create the run as the bundle's runner service account; its id."""
        with tempfile.TemporaryDirectory(prefix="secureml-run-") as folder:
            package = Path(folder) / "pipeline.yaml"
            package.write_text(pipeline_yaml, encoding="utf-8")
            result = self._call(
                "create the run",
                lambda: self.client.create_run_from_pipeline_package(
                    str(package),
                    arguments=dict(arguments),
                    run_name=run_name,
                    experiment_name=experiment,
                    namespace=self.namespace,
                    service_account=contract.RUNNER_NAME,
                ),
            )
        self.run_id = str(result.run_id)
        return self.run_id

    def get(self) -> Any:
        """The run as kfp.Client's `get_run` reads it (a kfp_server_api V2beta1Run), through the
        client's own run API so that a server that stops answering cannot outlast --timeout."""
        api = self.client._run_api
        return self._call(
            "read the run",
            # (connect, read) seconds: the generated client takes a lone number only as an int
            lambda: api.run_service_get_run(
                run_id=self.run_id, _request_timeout=(self.host.timeout, self.host.timeout)
            ),
        )

    def workflow(self) -> dict[str, Any] | None:
        """The run's Argo Workflow from the v1beta1 API; None where the server does not give it."""
        try:
            response = requests.get(
                f"{self.host.url}/apis/v1beta1/runs/{urllib.parse.quote(self.run_id)}",
                timeout=self.host.timeout,
                **self._auth(),
            )
        except requests.RequestException:
            return None
        if not response.ok:
            return None
        try:
            manifest = response.json().get("pipeline_runtime", {}).get("workflow_manifest") or ""
            found = json.loads(manifest) if manifest else None
        except (ValueError, AttributeError):
            return None
        return found if isinstance(found, dict) else None

    def pod_log(self, pod: str, namespace: str) -> str:
        """A step pod's log through the KFP UI's server; ClusterError says why it was not read."""
        query = {"podname": pod, "runid": self.run_id}
        if namespace:
            query["podnamespace"] = namespace
        try:
            response = requests.get(
                f"{self.host.url}/k8s/pod/logs",
                params=query,
                timeout=self.host.timeout,
                **self._auth(),
            )
        except requests.RequestException as err:
            raise ClusterError(f"pod log {pod}", why=_reason(err)) from None
        if not response.ok:
            text = response.text.strip().splitlines()
            raise ClusterError(
                f"pod log {pod}",
                why=f"{response.status_code} {text[0][:200] if text else response.reason}",
            )
        return response.text

    def _auth(self) -> dict[str, Any]:
        """The cookie and header kfp.Client sends, for the requests made beside it."""
        api = self.client._run_api.api_client
        headers = dict(api.default_headers)
        if getattr(api, "cookie", None):
            headers["Cookie"] = api.cookie
        token = api.configuration.api_key.get("authorization")
        if token:
            prefix = api.configuration.api_key_prefix.get("authorization", "")
            headers["Authorization"] = f"{prefix} {token}".strip()
        return {"headers": headers}

    def _call(self, what: str, call: Any) -> Any:
        """One kfp.Client call; the server's refusal or silence as a SecuremlError."""
        import kfp_server_api
        import urllib3

        try:
            with contextlib.redirect_stdout(io.StringIO()):  # kfp.Client prints its links
                return call()
        except kfp_server_api.ApiException as err:
            raise _refusal(self.host, what, err) from None
        except urllib3.exceptions.HTTPError as err:
            raise NetworkError(
                f"cannot {what}: the KFP server at {self.host.url} stopped answering",
                why=str(err).split(": ", 1)[-1][:300],
            ) from None


def _refusal(host: Host, what: str, err: Any) -> ClusterError | InputError:
    """A KFP API error: the grpc-gateway body's message, exit 2 either way (the run never started)."""
    message = ""
    try:
        body = json.loads(err.body or "{}")
        message = str(body.get("message") or body.get("error") or "")
    except (ValueError, AttributeError):
        message = str(err.body or "")[:300]
    status = int(err.status or 0)
    why = f"{status} {err.reason}: {message}".strip()
    if status in (401, 403):
        return ClusterError(
            f"the KFP server at {host.url} does not let this client {what}",
            why=why,
            fix="in multi-user KFP the user needs edit rights in the tenant's namespace "
            "(the profile's spec.namespace)",
        )
    if 400 <= status < 500:
        return InputError(
            f"the KFP server refused to {what}",
            why=why,
            fix="check the pipeline arguments (--arg) and the experiment; the message is KFP's",
        )
    return ClusterError(f"the KFP server at {host.url} failed to {what}", why=why)
