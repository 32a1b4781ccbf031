"""The bundle's trainer part, offline: what is rendered where, and that it fits the real CRDs
(../shared/fixtures/crds: Trainer v2.3.0, SPIRE's ClusterSPIFFEID). The server's own verdicts on
these objects are tests/cluster/test_trainer_server.py."""

from typing import Any

import jsonschema
import yaml

from secureml.bundle import BundleOptions, render_objects
from secureml.bundle.trainer import node_spiffe_id_template
from secureml.core import contract
from secureml.trainer.rules import VOLUME_SOURCES
from tests.support.crd_schemas import strict_schema
from tests.support.paths import fixture_file
from tests.support.profiles import make_profile
from tests.support.trainer import compiled_trainer, trainer_profile


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def _trainjob_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(
        fixture_file("crds", "kubeflow-trainer-v2.3.0-trainjobs.yaml").read_text()
    )
    return crd


def test_nothing_of_it_without_spec_trainer() -> None:
    objects = render_objects(make_profile(), BundleOptions())
    names = [o["metadata"]["name"] for o in objects]
    assert not [n for n in names if "trainjob" in n or "trainer" in n]
    role = next(o for o in objects if o["kind"] == "Role")
    assert not [r for r in role["rules"] if "trainjobs" in r["resources"]]


def test_policies_role_and_node_identity_with_spec_trainer() -> None:
    profile = trainer_profile()
    kinds = _by_kind(render_objects(profile, BundleOptions()))
    policies = {p["metadata"]["name"]: p for p in kinds["ValidatingAdmissionPolicy"]}
    trainjobs = policies["secureml-team-a-validate-trainjobs"]["spec"]
    assert trainjobs["matchConstraints"]["resourceRules"][0]["resources"] == ["trainjobs"]
    netpol = policies["secureml-team-a-validate-trainer-netpol"]["spec"]
    assert (
        "system:serviceaccount:team-a:secureml-pipeline-runner"
        in (netpol["matchConditions"][0]["expression"])
    )
    bound = {b["spec"]["policyName"] for b in kinds["ValidatingAdmissionPolicyBinding"]}
    assert set(policies) <= bound
    (role,) = kinds["Role"]
    assert {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
            "verbs": ["create"]} in role["rules"]  # fmt: skip
    ids = {s["metadata"]["name"]: s["spec"] for s in kinds["ClusterSPIFFEID"]}
    nodes = ids["secureml-team-a-trainer-nodes"]
    assert nodes["spiffeIDTemplate"] == node_spiffe_id_template(profile)
    assert nodes["spiffeIDTemplate"].endswith(
        '/node/{{ index .PodMeta.Labels "batch.kubernetes.io/job-completion-index" }}'
    )
    steps = ids["secureml-team-a-steps"]["podSelector"]["matchExpressions"]
    assert {"key": contract.LABEL_TRAINER_NODE, "operator": "DoesNotExist"} in steps
    crd = yaml.safe_load(fixture_file("crds", "spire.spiffe.io_clusterspiffeids.yaml").read_text())
    schema = strict_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"].update(apiVersion={}, kind={}, metadata={})
    for entry in kinds["ClusterSPIFFEID"]:
        jsonschema.validate(entry, schema)


def test_compiled_trainjob_fits_the_real_crd_schema() -> None:
    job = compiled_trainer().steps[0].trainjob
    schema = strict_schema(_trainjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    schema["properties"].update(apiVersion={}, kind={}, metadata={})
    jsonschema.validate(job, schema)


def test_the_volume_rule_knows_every_volume_source_of_the_crd() -> None:
    spec = _trainjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    patch = spec["spec"]["properties"]["runtimePatches"]["items"]["properties"]
    pod = patch["trainingRuntimeSpec"]["properties"]["template"]["properties"]["spec"]
    job = pod["properties"]["replicatedJobs"]["items"]["properties"]["template"]["properties"]
    volume = job["spec"]["properties"]["template"]["properties"]["spec"]["properties"]["volumes"]
    assert sorted(volume["items"]["properties"]) == sorted([*VOLUME_SOURCES, "name"])
