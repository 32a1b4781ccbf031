"""`secureml check-pod --server` on the real kube-apiserver, with team-a's bundle applied.

A compiled step pod (as KFP creates it, before the bundle's MutatingAdmissionPolicy) and KFP's
driver pod are admitted by the server's whole admission chain and come back mutated; a workload's
pod template is judged as its pod; attack pods are refused with the rule id the offline check
names, in the same table and JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from secureml.admission.server import check_pods_on_server
from secureml.bundle import BundleOptions, render_objects
from secureml.cli import app
from secureml.cluster import apply_bundle
from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.pods.mutation.catalogue import SPIFFE_VOLUME
from secureml.pods.preview import preview_driver_pods, preview_pods
from secureml.pods.workloads import pods_in_text
from secureml.profile.model import TenantProfile, load_profile
from tests.harness.controlplane import ControlPlane
from tests.support.admission import PIPELINE_RUNNER, wait_in_force
from tests.support.cluster_bundles import REPO, admin
from tests.support.submitted_pods import with_launcher_of

TEAM_A = REPO / "profiles" / "team-a.yaml"
ATTACKS = REPO / "tests" / "rules" / "attacks"
PIPELINE = REPO / "pipelines" / "secure_finetune.py"
# One attack per kind of refusal: Pod Security (one check, and capabilities split into its two
# rules), a secureml step rule of the ValidatingAdmissionPolicy, an every-pod rule.
REFUSED = {
    "t01-cap-sys-admin.yaml": "pss.capabilities_restricted.add",
    "t01-no-drop-all.yaml": "pss.capabilities_restricted.dropAll",
    "t02-host-pid.yaml": "pss.hostNamespaces",
    "t05-env-ld-preload.yaml": "secureml.forbiddenEnv",
    "t12-registry-docker-hub.yaml": "secureml.imageRegistry",
}


@pytest.fixture(scope="module")
def team_a(k8s_cluster: ControlPlane) -> TenantProfile:
    profile = load_profile(TEAM_A)
    cluster = admin(k8s_cluster)
    apply_bundle(render_objects(profile, BundleOptions()), cluster=cluster, typecheck_timeout_s=0)
    k8s_cluster.create_default_service_account(profile.spec.namespace)
    # the policy plugins load new bindings from informers: without this wait the first pod sent
    # (in whichever test xdist runs first) can pass unjudged
    wait_in_force(cluster, profile)
    return profile


@pytest.fixture(scope="module")
def submitted_step_pods(team_a: TenantProfile) -> dict[str, dict[str, Any]]:
    """The compiled pipeline's executor pods as KFP submits them: the preview without the
    bundle's mutations (the server applies those itself)."""
    compiled = compile_pipeline(load_pipeline(PIPELINE), team_a)
    docs = list(yaml.safe_load_all(compiled.yaml_text))
    return preview_pods(docs, team_a, mutate=False)


# The admin impersonates KFP's Argo controller (and keeps the admin's rights to create pods).
AS_THE_RUNNER = ("--as", PIPELINE_RUNNER, "--as-group", "system:masters")


def _check(k8s_cluster: ControlPlane, files: list[Path], *extra: str) -> tuple[int, Any]:
    result = CliRunner().invoke(
        app,
        [
            "check-pod",
            *map(str, files),
            "--server",
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            "--format",
            "json",
            *extra,
        ],
    )
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


def _write(folder: Path, name: str, documents: list[dict[str, Any]]) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def test_compiled_step_and_driver_pods_are_admitted_and_mutated(
    k8s_cluster: ControlPlane,
    team_a: TenantProfile,
    submitted_step_pods: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    compiled = compile_pipeline(load_pipeline(PIPELINE), team_a)
    drivers = preview_driver_pods(list(yaml.safe_load_all(compiled.yaml_text)), team_a)
    pods = [*submitted_step_pods.values(), *drivers.values()]
    path = _write(tmp_path, "pods.yaml", pods)
    # As the admin itself, every pod of KFP's is refused: a person creates no pipeline pod.
    code, report = _check(k8s_cluster, [path], "--namespace", team_a.spec.namespace)
    assert code == 1 and report["summary"]["denied"] == len(pods), report["summary"]
    rules = {v["rule"] for o in report["objects"] for v in o["violations"]}
    assert rules == {"secureml.pipelineIdentity"}, rules
    code, report = _check(k8s_cluster, [path], "--namespace", team_a.spec.namespace, *AS_THE_RUNNER)
    assert code == 0, report
    assert report["summary"] == {"objects": len(pods), "allowed": len(pods), "denied": 0}
    assert report["policy"]["as"] == PIPELINE_RUNNER
    assert report["policy"]["dryRun"] == "All"
    # The server ran the bundle's MutatingAdmissionPolicy on the steps: the SPIFFE socket volume.
    runner = admin(k8s_cluster)
    runner.api.default_headers["Impersonate-User"] = PIPELINE_RUNNER
    runner.api.default_headers["Impersonate-Group"] = "system:masters"
    verdicts = check_pods_on_server(
        list(pods_in_text(path.read_text(), source=str(path))),
        team_a.spec.namespace,
        cluster=runner,
    )
    steps = verdicts[: len(submitted_step_pods)]
    for verdict in steps:
        assert verdict.admitted is not None
        volumes = {v["name"] for v in verdict.admitted["spec"].get("volumes", [])}
        assert SPIFFE_VOLUME in volumes, verdict.pod.name
    # Nothing was stored: a dry run.
    listed = admin(k8s_cluster).get(f"/api/v1/namespaces/{team_a.spec.namespace}/pods")
    assert listed["items"] == []


def test_workload_template_is_judged_as_its_pod(
    k8s_cluster: ControlPlane,
    team_a: TenantProfile,
    submitted_step_pods: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    pod = next(iter(submitted_step_pods.values()))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "step-job", "namespace": team_a.spec.namespace},
        "spec": {"template": {"metadata": pod["metadata"], "spec": pod["spec"]}},
    }
    code, report = _check(k8s_cluster, [_write(tmp_path, "job.yaml", [job])], *AS_THE_RUNNER)
    assert code == 0, report["objects"]
    (verdict,) = report["objects"]
    assert (verdict["kind"], verdict["name"], verdict["verdict"]) == ("Job", "step-job", "allowed")


def _for_team_a(folder: Path, attack: str, profile: TenantProfile) -> Path:
    """The attack with main's launcher as the compiler writes it for team-a (the injected one):
    the server names only the first rule a pod breaks, so the attack's own rule comes first."""
    (pod,) = yaml.safe_load_all((ATTACKS / attack).read_text())
    return _write(folder, attack, [with_launcher_of(pod, profile)])


@pytest.mark.parametrize("attack", sorted(REFUSED))
def test_attack_refused_by_the_server_with_the_offline_rule(
    k8s_cluster: ControlPlane, team_a: TenantProfile, attack: str, tmp_path: Path
) -> None:
    path = _for_team_a(tmp_path, attack, team_a)
    code, server = _check(k8s_cluster, [path])
    assert code == 1, server
    offline_run = CliRunner().invoke(
        app, ["check-pod", str(path), "--profile", str(TEAM_A), "--format", "json"]
    )
    offline = json.loads(offline_run.stdout)
    assert offline_run.exit_code == 1
    (on_server,) = server["objects"]
    (judged_here,) = offline["objects"]
    assert set(on_server) == set(judged_here)  # the same report shape
    assert set(server) == set(offline) and set(server["summary"]) == set(offline["summary"])
    server_rules = [v["rule"] for v in on_server["violations"]]
    assert REFUSED[attack] in server_rules, on_server
    assert set(server_rules) <= {v["rule"] for v in judged_here["violations"]}


def test_table_output_matches_the_offline_format(
    k8s_cluster: ControlPlane, team_a: TenantProfile, tmp_path: Path
) -> None:
    path = _for_team_a(tmp_path, "t05-env-ld-preload.yaml", team_a)
    result = CliRunner().invoke(
        app, ["check-pod", str(path), "--server", "--kubeconfig", str(k8s_cluster.kubeconfig)]
    )
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["VERDICT", "OBJECT", "SOURCE", "VIOLATIONS"]
    assert lines[2].split()[:2] == ["DENIED", "Pod/env-ld-preload"]
    assert any(
        line.startswith(
            'Pod/env-ld-preload: secureml.forbiddenEnv: container "main" sets LD_PRELOAD'
        )
        for line in lines
    )
    assert lines[-1] == "1 object(s): 0 allowed, 1 denied"


def test_absent_namespace_is_unusable_input(
    k8s_cluster: ControlPlane, team_a: TenantProfile
) -> None:
    path = REPO / "tests" / "rules" / "allowed" / "team-a-cpu.yaml"
    result = CliRunner().invoke(
        app,
        [
            "check-pod",
            str(path),
            "--server",
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            "--namespace",
            "no-such-tenant",
        ],
    )
    assert result.exit_code == 2
    assert "namespace no-such-tenant does not exist" in result.output
