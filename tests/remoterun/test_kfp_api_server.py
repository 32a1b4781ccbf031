"""The KFP API stand-in refuses what KFP 2.17's API server refuses, as the real kfp.Client meets it."""

from __future__ import annotations

import warnings

import kfp
import kfp_server_api
import pytest
import requests

from tests.remoterun.kfp_api_server import KfpApiServer


def client(url: str) -> kfp.Client:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kfp.Client(host=url, namespace="team-a")


def test_unknown_fields_are_refused_as_grpc_gateway_refuses_them() -> None:
    with KfpApiServer() as server:
        answer = requests.post(
            f"{server.url}/apis/v2beta1/experiments",
            json={"display_name": "x", "owner": "me"},
            timeout=5,
        )
    assert answer.status_code == 400
    assert answer.json() == {"code": 3, "message": 'proto: unknown field "owner"', "details": []}


def test_a_run_without_a_name_or_pipeline_is_refused() -> None:
    with KfpApiServer() as server:
        experiment = client(server.url).create_experiment("e")
        api = client(server.url)._run_api
        with pytest.raises(kfp_server_api.ApiException) as nameless:
            api.run_service_create_run(
                run=kfp_server_api.V2beta1Run(experiment_id=experiment.experiment_id)
            )
        with pytest.raises(kfp_server_api.ApiException) as sourceless:
            api.run_service_create_run(
                run=kfp_server_api.V2beta1Run(
                    experiment_id=experiment.experiment_id, display_name="r"
                )
            )
        with pytest.raises(kfp_server_api.ApiException) as bad_spec:
            api.run_service_create_run(
                run=kfp_server_api.V2beta1Run(
                    experiment_id=experiment.experiment_id,
                    display_name="r",
                    pipeline_spec={"pipelineInfo": {"name": "p"}, "rooot": {}},
                )
            )
    assert nameless.value.status == 400 and "Run name cannot be empty" in nameless.value.body
    assert sourceless.value.status == 400 and "pipeline source" in sourceless.value.body
    assert bad_spec.value.status == 400 and "rooot" in bad_spec.value.body


def test_a_run_as_another_service_account_has_its_first_step_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from secureml.cli.compile import CompileInputs, compile_secured

    repo = Path(__file__).resolve().parents[2]
    compiled = compile_secured(
        CompileInputs(
            repo / "pipelines" / "secure_finetune.py",
            repo / "examples" / "profiles" / "team-a-dev.yaml",
            None,
            None,
            False,
            False,
            False,
            False,
            None,
            (None, None, None),
            None,
        )
    )
    assert compiled.result is not None
    package = tmp_path / "p.yaml"
    package.write_text(compiled.result.yaml_text)
    with KfpApiServer() as server:
        run = client(server.url).create_run_from_pipeline_package(str(package))  # no account
        for _ in range(3):
            client(server.url).get_run(run.run_id)
        manifest = requests.get(f"{server.url}/apis/v1beta1/runs/{run.run_id}", timeout=5).json()
    assert "secureml.serviceAccount: pod runs as service account default-editor" in str(manifest)
