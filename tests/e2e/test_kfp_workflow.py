"""The Workflow the harness submits has KFP 2.17's shape (tests/harness/kfp_workflow.py), offline.

- Each 2.17.0 golden Workflow of ../shared/fixtures/kfp-golden (KFP's own compiler output) is
  reproduced exactly by `compile_workflow` from the pipeline recovered from the golden's own
  arguments (component specs, containers, root DAG, kubernetes configs); hello_world also from the
  same pipeline compiled by the kfp SDK. Differences: none (the images are passed as KFP's tests
  have them, `:latest`, and the API server's log settings unset, as in KFP's tests).
- `kfp_workflow` is exactly the compiler's Workflow plus what KFP's API server changes for a run.
- The reference pipeline compiled for team-a-dev becomes a Workflow that Argo v4.0.5's own
  Workflow CRD schema (from Argo's Go module, strict as the API server prunes) accepts.
- Each task's driver patch (`driver_patches`), applied to the Workflow's `system-container-impl`
  the way secureml.pods.argo models Argo's podSpecPatch, gives exactly the previewed pod.
- What the model does not produce is refused with a clear error.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from secureml.core import contract
from secureml.pods.argo import Template, Workflow, argo_pod
from secureml.pods.preview import preview_pods
from secureml.profile.model import load_profile
from tests.e2e.environment import ARGO_MODULE, REPO
from tests.e2e.steps import as_run, compile_reference
from tests.harness.kfp_workflow import (
    ISTIO_INJECT,
    PLACEHOLDERS,
    RUN_ID_LABEL,
    RUN_NAME_ANNOTATION,
    UNSET,
    KfpSystemImages,
    UnsupportedPipelineError,
    compile_workflow,
    driver_patches,
    go_json,
    kfp_workflow,
    patch_key,
    pipeline_from_workflow,
    preview_run_id,
)
from tests.support.crd_schemas import strict_schema
from tests.support.paths import fixture_dir

GOLDEN = ("hello_world", "pvc_mount", "secret_as_volume")
UPSTREAM_IMAGES = KfpSystemImages(
    driver="ghcr.io/kubeflow/kfp-driver:latest", launcher="ghcr.io/kubeflow/kfp-launcher:latest"
)
PROFILE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
ARGO_WORKFLOW_CRD = "manifests/base/crds/full/argoproj.io_workflows.yaml"
IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "ab" * 32
# team-a's GPUs by device plugin, team-dra's by DRA claims (team-restricted and team-conf: their
# tiers require signed images, which nothing signs here).
TENANTS = (REPO / "profiles" / "team-a.yaml", REPO / "profiles" / "team-dra.yaml")


def _golden(name: str) -> dict[str, Any]:
    path = fixture_dir("kfp-golden") / f"workflow-golden-2.17.0-{name}.yaml"
    return dict(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_workflow_from_its_own_pipeline(name: str) -> None:
    golden = _golden(name)
    docs = pipeline_from_workflow(golden)
    assert compile_workflow(docs, images=UPSTREAM_IMAGES, settings=UNSET) == golden


def test_golden_hello_world_from_the_kfp_sdk(tmp_path: Path) -> None:
    from kfp import compiler, dsl

    @dsl.container_component
    def echo():  # type: ignore[no-untyped-def]  # kfp reads the annotation; test_data/sdk_compiled_pipelines/valid/hello_world.py
        return dsl.ContainerSpec(
            image="registry.access.redhat.com/ubi9/python-311:latest",
            command=["echo"],
            args=["hello world"],
        )

    compiler.Compiler().compile(echo, str(tmp_path / "echo.yaml"))
    docs = list(yaml.safe_load_all((tmp_path / "echo.yaml").read_text()))
    workflow = compile_workflow(docs, images=UPSTREAM_IMAGES, settings=UNSET)
    assert workflow == _golden("hello_world")


def test_go_json_writes_what_go_writes() -> None:
    # Go 1.26's encoding/json.Marshal of the same values (float64 and map[string]interface{}).
    values = [1e-7, 1e21, 1e20, 123456789.0, 0.000001, 200, 0.5, -1.5e-10, 2.5e22, 1e16]
    written = ["1e-7", "1e+21", "100000000000000000000", "123456789", "0.000001", "200", "0.5"]
    written += ["-1.5e-10", "2.5e+22", "10000000000000000"]
    assert [go_json(v) for v in values] == written
    assert go_json({"b": 1, "a": "<a&b>\u2028"}) == '{"a":"\\u003ca\\u0026b\\u003e\\u2028","b":1}'


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """pipelines/secure_finetune.py compiled by `secureml compile` for team-a-dev."""
    return compile_reference(IMAGE, PROFILE, tmp_path_factory.mktemp("reference"))


@pytest.fixture(scope="module", params=[PROFILE, *TENANTS], ids=lambda path: path.stem)
def tenant_reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, Any]], Path]:
    """The reference pipeline compiled for team-a-dev, team-a and team-dra (the last two with
    signatures not required: nothing here signs the image), and the profile it was compiled for."""
    folder = tmp_path_factory.mktemp("tenant")
    profile = request.param
    if profile != PROFILE:
        spec = yaml.safe_load(profile.read_text())
        spec["spec"]["images"]["signatures"]["required"] = False
        profile = folder / profile.name
        profile.write_text(yaml.safe_dump(spec, sort_keys=False))
    return compile_reference(IMAGE, profile, folder), profile


def test_kfp_workflow_is_the_compilers_with_the_api_servers_changes(
    reference: list[dict[str, Any]],
) -> None:
    run_id = "0f8fad5b-d9cb-469f-a165-70867728950e"
    workflow = kfp_workflow(
        reference, name="secure-finetune-x1", namespace="team-a",
        service_account=contract.RUNNER_NAME, run_id=run_id, display_name="nightly",
    )  # fmt: skip
    expected = compile_workflow(reference, display_name="nightly")
    del expected["status"]
    expected["metadata"] = {
        "name": "secure-finetune-x1",
        "namespace": "team-a",
        "labels": {RUN_ID_LABEL: run_id},
        "annotations": {RUN_NAME_ANNOTATION: "nightly"},
    }
    expected["spec"]["serviceAccountName"] = contract.RUNNER_NAME
    expected["spec"]["podMetadata"]["labels"][RUN_ID_LABEL] = run_id
    for template in expected["spec"]["templates"]:
        template["metadata"].setdefault("annotations", {})[ISTIO_INJECT] = "false"
        for container in (template.get("container"),):
            if container and "--run_id" in container.get("args", []):
                index = container["args"].index("--run_id") + 1
                assert container["args"][index] == "{{workflow.uid}}"
                container["args"][index] = run_id
    assert workflow == expected
    assert "{{workflow.uid}}" not in json.dumps(workflow)
    # The defaults: the preview's run id, the run's name as its display name.
    default = kfp_workflow(
        reference, name="secure-finetune-x1", namespace="team-a",
        service_account=contract.RUNNER_NAME,
    )  # fmt: skip
    assert default["metadata"]["labels"][RUN_ID_LABEL] == preview_run_id(
        "team-a", "secure-finetune"
    )
    assert default["metadata"]["annotations"][RUN_NAME_ANNOTATION] == "secure-finetune-x1"


def _argo_workflow_schema() -> dict[str, Any]:
    if shutil.which("go") is None:
        reason = f"Argo's Workflow CRD is read from the Go module {ARGO_MODULE}: no Go on PATH"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    done = subprocess.run(
        ["go", "mod", "download", "-json", ARGO_MODULE],
        capture_output=True, text=True, check=True, env={**os.environ, "GOFLAGS": ""}, cwd="/",
    )  # fmt: skip
    path = Path(json.loads(done.stdout)["Dir"]) / ARGO_WORKFLOW_CRD
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return dict(strict_schema(schema))


def test_reference_workflow_fits_argos_crd(
    tenant_reference: tuple[list[dict[str, Any]], Path],
) -> None:
    reference, path = tenant_reference
    workflow = kfp_workflow(
        reference, name="secure-finetune-x1", namespace=load_profile(path).spec.namespace,
        service_account=contract.RUNNER_NAME,
    )  # fmt: skip
    validator = jsonschema.Draft7Validator(_argo_workflow_schema())
    validator.validate(workflow)
    bad = copy.deepcopy(workflow)  # the check can fail: a field Argo does not know
    bad["spec"]["templates"][0]["container"]["podSpecPatch"] = "{}"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)


def _parameters(task: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in task["arguments"]["parameters"]}


def _substitute(value: Any, parameters: dict[str, str]) -> Any:
    """Argo's `{{inputs.parameters.X}}` of one template call, in keys and values."""
    if isinstance(value, dict):
        return {_substitute(k, parameters): _substitute(v, parameters) for k, v in value.items()}
    if isinstance(value, str):
        for name, given in parameters.items():
            value = value.replace(f"{{{{inputs.parameters.{name}}}}}", given)
    return value


def test_driver_patch_turns_the_impl_template_into_the_previewed_pod(
    tenant_reference: tuple[list[dict[str, Any]], Path],
) -> None:
    reference, path = tenant_reference
    profile = load_profile(path)
    pods = preview_pods(reference, profile, mutate=False)
    labels = next(iter(pods.values()))["metadata"]["labels"]
    name, run_id = labels["workflows.argoproj.io/workflow"], labels[RUN_ID_LABEL]
    workflow = kfp_workflow(
        reference, name=name, namespace=profile.spec.namespace,
        service_account=contract.RUNNER_NAME,
    )  # fmt: skip
    assert workflow["metadata"]["labels"][RUN_ID_LABEL] == run_id  # the preview's run id
    values = {
        task: {
            "<run_id>": run_id,
            "<execution_id>": str(index + 10),
            "<executor_input>": json.dumps({"inputs": {"task": task}}),
            "<component_spec>": json.dumps(reference[0]["components"][f"comp-{task}"]),
        }
        for index, task in enumerate(pods)
    }
    patches = driver_patches(reference, values)
    assert sorted(patches) == sorted(pods) == ["evaluate", "prep", "train"]
    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    root_tasks = {t["name"]: t for t in templates["root"]["dag"]["tasks"]}
    pod_metadata = workflow["spec"]["podMetadata"]
    argo = Workflow(
        name=name, namespace=profile.spec.namespace, uid=run_id,
        service_account=workflow["spec"]["serviceAccountName"],
        pod_labels=pod_metadata["labels"], pod_annotations=pod_metadata["annotations"],
    )  # fmt: skip
    for task, pod in pods.items():
        executor = templates[root_tasks[task]["template"]]
        (call,) = executor["dag"]["tasks"]
        given = _substitute(_parameters(call), _parameters(root_tasks[task]))
        impl = _substitute(templates[call["template"]], given)
        template = Template(
            name=impl["name"],
            main={**impl["container"], "name": contract.KFP_MAIN_CONTAINER},
            init_containers=tuple(impl["initContainers"]),
            volumes=tuple(impl["volumes"]),
            security_context=impl["securityContext"],
            labels=impl["metadata"].get("labels", {}),
            annotations=impl["metadata"]["annotations"],
            patch=json.loads(patches[task]),
        )
        argo_made = argo_pod(argo, f"{name}.root.{task}.executor", template)
        main = next(c for c in argo_made["spec"]["containers"] if c["name"] == "main")
        main["resources"] = {k: v for k, v in main["resources"].items() if v}  # `resources: {}`
        if not main["resources"]:
            del main["resources"]
        assert argo_made == as_run(pod, values[task]), task


def test_driver_patches_of_the_goldens() -> None:
    """hello_world's patch runs `echo hello world` under the launcher; secret_as_volume's names
    its secret by a pipeline input, which only KFP's driver resolves: refused, not half-made."""
    docs = pipeline_from_workflow(_golden("hello_world"))
    values = {"echo": {placeholder: "v" for placeholder in PLACEHOLDERS}}
    (main,) = json.loads(driver_patches(docs, values)["echo"])["containers"]
    assert main["image"] == "registry.access.redhat.com/ubi9/python-311:latest"
    assert main["command"][0] == "/kfp-launcher/launch" and main["command"][-1] == "--"
    assert main["args"] == ["echo", "hello world"]
    docs = pipeline_from_workflow(_golden("secret_as_volume"))
    with pytest.raises(ValueError, match=r"task comp: .* volume\(s\) \['secret-0'\] without"):
        driver_patches(docs, {"comp": values["echo"]})


def test_patch_key_names_run_and_task() -> None:
    assert patch_key("secure-finetune-x1", "train") == (
        "kfp-driver-standin/secure-finetune-x1/train/pod-spec-patch"
    )


def _mutated(docs: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    docs = copy.deepcopy(docs)
    spec, platform = docs
    tasks = spec["root"]["dag"]["tasks"]
    if change == "retry":
        tasks["train"]["retryPolicy"] = {"maxRetryCount": 2}
    elif change == "condition":
        tasks["train"]["triggerPolicy"] = {"condition": "1 == 1"}
    elif change == "sub-dag":
        spec["components"]["comp-train"] = {"dag": {"tasks": {}}}
    elif change == "importer":
        spec["deploymentSpec"]["executors"]["exec-train"] = {"importer": {}}
    elif change == "unknown-container-field":
        spec["deploymentSpec"]["executors"]["exec-train"]["container"]["workingDir"] = "/w"
    elif change == "workspace":
        platform["platforms"]["kubernetes"]["pipelineConfig"] = {"workspace": {"size": "1Gi"}}
    elif change == "no-default":
        del spec["root"]["inputDefinitions"]["parameters"]["rows"]["defaultValue"]
        del spec["root"]["inputDefinitions"]["parameters"]["rows"]["isOptional"]
    return docs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("retry", "root.dag.tasks.train.retryPolicy: retry policies"),
        ("condition", "root.dag.tasks.train.triggerPolicy: conditions"),
        ("sub-dag", "root.dag.tasks.train: component comp-train is a sub-DAG"),
        ("importer", "deploymentSpec.executors.exec-train: only container executors"),
        ("unknown-container-field", "exec-train.container: unknown field(s) ['workingDir']"),
        ("workspace", "platforms.kubernetes.pipelineConfig"),
        ("no-default", "root.inputDefinitions.parameters.rows: no default"),
    ],
)
def test_what_kfp_would_shape_otherwise_is_refused(
    reference: list[dict[str, Any]], change: str, message: str
) -> None:
    with pytest.raises(UnsupportedPipelineError) as refused:
        kfp_workflow(
            _mutated(reference, change), name="x", namespace="team-a",
            service_account=contract.RUNNER_NAME,
        )  # fmt: skip
    assert message in str(refused.value)
