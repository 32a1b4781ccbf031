"""STAND-IN for a Kubeflow Pipelines 2.17 server: the HTTP surface `secureml run --host` and `doctor
pipeline` use, nothing behind it (KFP's API server cannot be built or pulled here: issue #32).

What it speaks, and from where it was learned (kubeflow/pipelines 2.17.0; no code copied):

- v2beta1 REST (`backend/api/v2beta1/*.proto`, served through grpc-gateway with
  `DiscardUnknown: false`, `backend/src/apiserver/common/utils.go`): `GET healthz`, `GET/POST
  experiments`, `POST runs`, `GET runs/{id}`, `POST runs/{id}:terminate`. Every request body is
  parsed into the `kfp_server_api` model of the package kfp 2.17.3 installs (its `openapi_types`
  and `attribute_map`); an unknown field, a wrong JSON type or a value outside an enum is refused
  with 400 and grpc-gateway's `{"code": 3, "message": ...}`, as the real gateway refuses it. The
  run's `pipeline_spec` is parsed into the `PipelineSpec` (and `PlatformSpec`) messages of
  kfp-pipeline-spec, unknown fields refused. RefusedError as `CreateRun` refuses (run_server.go,
  api_converter.go `toModelRun`): an empty display name, no pipeline source, `plugins_output`
  set by the client, an unknown experiment; in multi-user mode a run or experiment outside the
  namespace the server was started for (KFP's SubjectAccessReview answers 403).
- v1beta1 `GET runs/{id}` (`backend/api/v1beta1/run.proto`): only `run.id` and
  `pipeline_runtime.workflow_manifest`, the Argo Workflow whose node statuses it scripts (no
  v1beta1 model exists in kfp_server_api 2.17.3 to parse against).
- the KFP UI server's `GET /k8s/pod/logs` (`frontend/server/handlers/pod-logs.ts`): 400 without
  `podname`, 422 without `podnamespace` in multi-user mode, 404 for a pod it has no log of.

The run follows a script chosen per server (`Script`), one step per `GET runs/{id}`: every step
pending, running, succeeded (`succeed`); a step refused at admission, its node `Error` with the API
server's refusal text (`refuse`); a step pending for ever with that text (`pending-refused`) or with
a scheduler's message (`stuck`); a step whose command fails (`fail`). A run created with a service
account other than the bundle's runner has its first step refused by `secureml.serviceAccount`, as
the bundle's admission policy would. Task details carry what KFP 2.17's `toApiPipelineTaskDetail`
fills (display name, state, times; no pod name, no message).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kfp_server_api
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from secureml.core import contract

GRPC_INVALID_ARGUMENT, GRPC_NOT_FOUND, GRPC_PERMISSION_DENIED = 3, 5, 7
FORBID_ENV = 'secureml.forbiddenEnv: container "main" sets LD_PRELOAD: no container may set it'


class RefusedError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def parse_model(data: Any, klass: str, where: str = "") -> Any:
    """`data` (JSON) as the kfp_server_api model `klass`; RefusedError as grpc-gateway refuses it."""
    if klass in ("object", "str", "int", "bool", "datetime", "float"):
        expected = {"str": str, "int": (int, str), "bool": bool, "datetime": str, "float": float}
        if klass != "object" and not isinstance(data, expected[klass]):
            raise RefusedError(
                400, GRPC_INVALID_ARGUMENT, f"proto: syntax error: {where} wants {klass}"
            )
        return data
    if klass.startswith("list["):
        if not isinstance(data, list):
            raise RefusedError(
                400, GRPC_INVALID_ARGUMENT, f"proto: syntax error: {where} wants a list"
            )
        return [parse_model(item, klass[5:-1], where) for item in data]
    if klass.startswith("dict("):
        if not isinstance(data, dict):
            raise RefusedError(
                400, GRPC_INVALID_ARGUMENT, f"proto: syntax error: {where} wants a map"
            )
        inner = klass[5:-1].split(", ", 1)[1]
        return {k: parse_model(v, inner, f"{where}.{k}") for k, v in data.items()}
    model = getattr(kfp_server_api.models, klass)
    if not model.openapi_types:  # an enum
        allowed = [v for k, v in vars(model).items() if k.isupper() and isinstance(v, str)]
        if data not in allowed:
            raise RefusedError(
                400, GRPC_INVALID_ARGUMENT, f"invalid value for enum {klass}: {data!r}"
            )
        return data
    if not isinstance(data, dict):
        raise RefusedError(
            400, GRPC_INVALID_ARGUMENT, f"proto: syntax error: {where} wants an object"
        )
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    values = {}
    for key, value in data.items():
        if key not in by_json:
            raise RefusedError(400, GRPC_INVALID_ARGUMENT, f'proto: unknown field "{key}"')
        attr = by_json[key]
        values[attr] = parse_model(value, model.openapi_types[attr], f"{where}.{key}".strip("."))
    return model(**values)


def parse_pipeline_spec(spec: Any) -> pipeline_spec_pb2.PipelineSpec:
    """The run's pipeline_spec as KFP's API server reads it: the PipelineSpec, or the pair of
    `pipeline_spec` and `platform_spec` a pipeline with Kubernetes settings carries."""
    if not isinstance(spec, dict):
        raise RefusedError(400, GRPC_INVALID_ARGUMENT, "Invalid input error: pipeline_spec")
    try:
        if "pipeline_spec" in spec:
            platform = pipeline_spec_pb2.PlatformSpec()
            json_format.ParseDict(spec.get("platform_spec") or {}, platform)
            spec = spec["pipeline_spec"]
        message = pipeline_spec_pb2.PipelineSpec()
        json_format.ParseDict(spec, message)
    except json_format.ParseError as err:
        raise RefusedError(
            400, GRPC_INVALID_ARGUMENT, f"Failed to parse the pipeline spec: {err}"
        ) from None
    return message


@dataclass
class Step:
    name: str
    node_id: str
    phase: str = ""  # Argo's node phase; "" before the node exists
    message: str = ""


@dataclass
class Run:
    run_id: str
    body: Any  # the V2beta1Run as created
    namespace: str
    workflow: str
    steps: list[Step]
    script: str
    refused_step: int
    refusal: str
    tick: int = 0
    terminated: bool = False
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


def _in_order(tasks: Any) -> list[str]:
    """The DAG's task names, each after the tasks it depends on (Argo's order for a chain)."""
    done: list[str] = []
    pending = sorted(tasks)
    while pending:
        ready = [t for t in pending if set(tasks[t].dependent_tasks) <= set(done)]
        done.extend(ready or pending)
        pending = [t for t in pending if t not in done]
    return done


def refusal_text(pod: str, tenant: str, policy: str, message: str) -> str:
    """What the API server answers a create the bundle's ValidatingAdmissionPolicy denies."""
    name = f"secureml-{tenant}-{policy}"
    return (
        f"pods \"{pod}\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding "
        f"'{name}' denied request: {message}"
    )


def audit_line(run: Run, step: Step, exit_code: int) -> str:
    """The launcher's `secureml-audit:` line for a step (the record's fields per docs/audit.md)."""
    record = {
        "schema": "secureml.dev/audit/v1",
        "run_id": run.run_id,
        "pipeline": run.workflow.rsplit("-", 1)[0],
        "step": step.name,
        "tenant": run.namespace,
        "namespace": run.namespace,
        "isolation": contract.ISOLATION_NONE,
        "gpu_request": None,
        "stages": [
            {"name": "identity", "status": "ok", "seconds": 0.01},
            {"name": "run", "status": "ok" if exit_code == 0 else "failed", "seconds": 0.2},
        ],
        "violations": [],
        "exit_code": exit_code,
        "child_exit_code": exit_code,
        "started_at": run.created,
        "ended_at": run.created,
        "seconds": 0.25,
        "spiffe_id": f"spiffe://example.org/ns/{run.namespace}/step/{step.name}",
    }
    return contract.AUDIT_LINE_PREFIX + json.dumps(record, sort_keys=True)


class KfpApiServer:
    """The stand-in, on 127.0.0.1 and a free port, in a thread: `with KfpApiServer() as server`."""

    def __init__(
        self,
        *,
        multi_user: bool = False,
        namespace: str = "team-a",
        tenant: str = "team-a",
        script: str = "succeed",
        refused_step: int = 0,
        serve_workflow: bool = True,
        serve_logs: bool = True,
        hang_after: int | None = None,
    ) -> None:
        self.multi_user, self.namespace, self.tenant = multi_user, namespace, tenant
        self.script, self.refused_step = script, refused_step
        self.serve_workflow, self.serve_logs = serve_workflow, serve_logs
        self.hang_after = hang_after  # GET runs/{id} stops answering after this many reads
        self._stop = threading.Event()
        self.experiments: dict[str, Any] = {}
        self.runs: dict[str, Run] = {}
        self.requests: list[tuple[str, str]] = []
        self.refusals: list[str] = []  # the messages of what it refused
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> KfpApiServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()

    # --- the API ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
        self.requests.append((method, path))
        if method == "GET" and path == "/apis/v2beta1/healthz":
            return {"multi_user": self.multi_user, "pipeline_store": "database"}
        if path == "/apis/v2beta1/experiments":
            return self._experiments(method, query, body)
        if method == "POST" and path == "/apis/v2beta1/runs":
            return self._create_run(parse_model(body, "V2beta1Run"))
        prefix, _, rest = path.partition("/runs/")
        if prefix == "/apis/v2beta1" and rest.endswith(":terminate") and method == "POST":
            self._run(rest.removesuffix(":terminate")).terminated = True
            return {}
        if prefix == "/apis/v2beta1" and method == "GET":
            run = self._run(rest)
            if self.hang_after is not None and run.tick >= self.hang_after:
                self._stop.wait(30)  # a server that stopped answering (released at exit)
            return self._get_run(run)
        if prefix == "/apis/v1beta1" and method == "GET" and self.serve_workflow:
            run = self._run(rest)
            return {
                "run": {"id": run.run_id, "name": run.body.display_name},
                "pipeline_runtime": {"workflow_manifest": json.dumps(self._workflow(run))},
            }
        raise RefusedError(404, GRPC_NOT_FOUND, f"Not Found: {method} {path}")

    def _authorize(self, namespace: str | None) -> None:
        if self.multi_user and namespace != self.namespace:
            raise RefusedError(
                403,
                GRPC_PERMISSION_DENIED,
                f"PermissionDenied: User 'user@example.com' is not authorized with reason: "
                f"namespace {namespace or '(none)'!r}",
            )

    def _experiments(self, method: str, query: dict[str, str], body: Any) -> Any:
        if method == "POST":
            experiment = parse_model(body, "V2beta1Experiment")
            if not experiment.display_name:
                raise RefusedError(400, GRPC_INVALID_ARGUMENT, "Experiment name cannot be empty")
            self._authorize(experiment.namespace if self.multi_user else self.namespace)
            experiment.experiment_id = str(uuid.uuid4())
            self.experiments[experiment.experiment_id] = experiment
            return experiment.to_dict()
        if self.multi_user:
            self._authorize(query.get("namespace"))
        wanted = None
        if query.get("filter"):
            for predicate in json.loads(query["filter"]).get("predicates", []):
                if predicate.get("key") == "display_name":
                    wanted = predicate.get("stringValue", predicate.get("string_value"))
        found = [
            e.to_dict()
            for e in self.experiments.values()
            if wanted is None or e.display_name == wanted
        ]
        return {"experiments": found, "total_size": len(found)} if found else {}

    def _create_run(self, run: Any) -> Any:
        if run.plugins_output is not None:
            raise RefusedError(
                400, GRPC_INVALID_ARGUMENT, "plugins_output must not be set by the client"
            )
        if not run.display_name:
            raise RefusedError(400, GRPC_INVALID_ARGUMENT, "Run name cannot be empty")
        if run.pipeline_spec is None and run.pipeline_version_reference is None:
            raise RefusedError(400, GRPC_INVALID_ARGUMENT, "Failed to parse the pipeline source")
        if run.pipeline_version_reference is not None:
            raise RefusedError(404, GRPC_NOT_FOUND, "pipeline version not found (none uploaded)")
        spec = parse_pipeline_spec(run.pipeline_spec)
        experiment = self.experiments.get(run.experiment_id or "")
        if experiment is None:
            raise RefusedError(404, GRPC_NOT_FOUND, f"Experiment {run.experiment_id} not found")
        namespace = experiment.namespace if self.multi_user else self.namespace
        self._authorize(namespace)
        declared = spec.root.input_definitions.parameters
        for name in (run.runtime_config.parameters or {}) if run.runtime_config else {}:
            if name not in declared:
                raise RefusedError(
                    400,
                    GRPC_INVALID_ARGUMENT,
                    f"Invalid input error: Unrecognized input parameter: {name}",
                )
        run.run_id = str(uuid.uuid4())
        workflow = f"{spec.pipeline_info.name}-{run.run_id[:5]}"
        steps = [
            Step(task, f"{workflow}-{index + 1:010d}")
            for index, task in enumerate(_in_order(spec.root.dag.tasks))
        ]
        script, refused, refusal = self.script, self.refused_step, ""
        if script in ("refuse", "pending-refused"):
            refusal = refusal_text(f"{workflow}-x", self.tenant, "validate-steps", FORBID_ENV)
        if (run.service_account or "") != contract.RUNNER_NAME:
            script, refused = "refuse", 0
            account = run.service_account or "default-editor"  # KFP's default in multi-user mode
            refusal = refusal_text(
                f"{workflow}-x",
                self.tenant,
                "validate-pods",
                f"secureml.serviceAccount: pod runs as service account {account}, not the runner "
                f"{contract.RUNNER_NAME}",
            )
        with self._lock:
            self.runs[run.run_id] = Run(
                run.run_id, run, namespace, workflow, steps, script, refused, refusal
            )
        return self._get_run(self.runs[run.run_id], advance=False)

    def _run(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise RefusedError(404, GRPC_NOT_FOUND, f"Run {run_id} not found")
        self._authorize(run.namespace)
        return run

    # --- the script -------------------------------------------------------------------------

    def _advance(self, run: Run) -> None:
        """One step of the script: the next step starts, or the running one ends."""
        run.tick += 1
        if run.terminated:
            for step in run.steps:
                if step.phase in ("", "Pending", "Running"):
                    step.phase, step.message = "Failed", "terminated"
            return
        current = next((s for s in run.steps if s.phase not in ("Succeeded",)), None)
        if current is None:
            return
        index = run.steps.index(current)
        refused_here = index == run.refused_step
        if current.phase == "":
            current.phase = "Pending"
            if refused_here and run.script == "pending-refused":
                current.message = run.refusal
            elif refused_here and run.script == "stuck":
                current.message = (
                    "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
                )
        elif current.phase == "Pending":
            if refused_here and run.script in ("pending-refused", "stuck"):
                return
            if refused_here and run.script == "refuse":
                current.phase, current.message = "Error", run.refusal
                return
            current.phase = "Running"
        elif current.phase == "Running":
            if refused_here and run.script == "fail":
                current.phase, current.message = "Failed", "Error (exit code 1)"
                return
            current.phase = "Succeeded"

    def _run_state(self, run: Run) -> str:
        phases = [s.phase for s in run.steps]
        if run.terminated:
            return "CANCELED"
        if any(p in ("Failed", "Error") for p in phases):
            return "FAILED"
        if phases and all(p == "Succeeded" for p in phases):
            return "SUCCEEDED"
        return "RUNNING" if any(phases) else "PENDING"

    def _get_run(self, run: Run, *, advance: bool = True) -> Any:
        with self._lock:
            if advance:
                self._advance(run)
            body = kfp_server_api.V2beta1Run(
                **{
                    k: getattr(run.body, k)
                    for k in ("display_name", "experiment_id", "service_account", "runtime_config")
                }
            )
            body.run_id = run.run_id
            body.state = self._run_state(run)
            body.created_at = run.created
            tasks = []
            for step in run.steps:
                if not step.phase:
                    continue
                state = {"Pending": "PENDING", "Running": "RUNNING", "Succeeded": "SUCCEEDED"}
                tasks.append(
                    kfp_server_api.V2beta1PipelineTaskDetail(
                        run_id=run.run_id,
                        display_name=step.name,
                        create_time=run.created,
                        state=state.get(step.phase, "FAILED"),
                        child_tasks=[{"pod_name": f"{step.node_id}-impl"}],
                    )
                )
                tasks.append(
                    kfp_server_api.V2beta1PipelineTaskDetail(
                        run_id=run.run_id,
                        display_name=f"{step.name}-driver",
                        create_time=run.created,
                        state="SUCCEEDED",
                    )
                )
            if tasks:
                body.run_details = kfp_server_api.V2beta1RunDetails(task_details=tasks)
            return kfp_server_api.ApiClient().sanitize_for_serialization(body)

    def _workflow(self, run: Run) -> dict[str, Any]:
        """The Argo Workflow KFP keeps for the run: one DAG node and one executor pod per step."""
        nodes: dict[str, Any] = {}
        for step in run.steps:
            if not step.phase:
                continue
            pod_id = f"{step.node_id}-impl-{zlib.crc32(step.name.encode())}"
            nodes[step.node_id] = {
                "id": step.node_id,
                "name": f"{run.workflow}.root.{step.name}",
                "displayName": step.name,
                "type": "DAG",
                "templateName": "system-container-executor",
                "phase": step.phase,
                "children": [pod_id],
            }
            nodes[pod_id] = {
                "id": pod_id,
                "name": f"{run.workflow}.root.{step.name}.executor",
                "displayName": "executor",
                "type": "Pod",
                "templateName": "system-container-impl",
                "phase": step.phase,
                "message": step.message,
            }
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": run.workflow, "namespace": run.namespace},
            "spec": {"serviceAccountName": run.body.service_account},
            "status": {"phase": self._run_state(run), "nodes": nodes},
        }

    def pod_log(self, query: dict[str, str]) -> tuple[int, str]:
        """The KFP UI server's /k8s/pod/logs."""
        pod = query.get("podname", "")
        if not pod:
            return 400, "podname argument is required"
        if self.multi_user and not query.get("podnamespace"):
            return 422, "podnamespace argument is required"
        if not self.serve_logs:
            return 500, "Could not get main container logs: Error: pods not found"
        for run in self.runs.values():
            workflow = self._workflow(run)
            for node in workflow["status"]["nodes"].values():
                if node["type"] != "Pod" or node["phase"] not in ("Succeeded", "Failed"):
                    continue
                name = f"{run.workflow}-system-container-impl-{node['id'].rsplit('-', 1)[-1]}"
                if name == pod:
                    step = next(s for s in run.steps if node["id"].startswith(s.node_id))
                    code = 0 if node["phase"] == "Succeeded" else 1
                    return 200, f"hello from {step.name}\n{audit_line(run, step, code)}\n"
        return 404, "pod not found"


def _handler(server: KfpApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:  # quiet
            return

        def _answer(
            self, status: int, payload: Any, content_type: str = "application/json"
        ) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (hang_after)

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/k8s/pod/logs" and method == "GET":
                status, text = server.pod_log(query)
                self._answer(status, text.encode(), "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    raise RefusedError(400, GRPC_INVALID_ARGUMENT, "proto: syntax error") from None
                self._answer(200, server.handle(method, url.path, query, body))
            except RefusedError as refused:
                server.refusals.append(refused.message)
                self._answer(
                    refused.status,
                    {"code": refused.code, "message": refused.message, "details": []},
                )

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
