"""The rendered ValidatingAdmissionPolicies, read back from the bundle and applied the way the API
server applies them (a policy whose matchConditions are all true runs its validations), give every
pod of the rule corpus the same verdict and the same rule ids as `secureml.rules.evaluate`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from secureml.bundle import BundleOptions, render_bundle
from secureml.pods.workloads import pods_in_text
from secureml.rules import evaluate, rules_for_profile
from secureml.rules.engine import admission_view, compiled
from tests.bundle.conftest import ROOT, load
from tests.support.admission import PIPELINE_RUNNER

CORPUS = sorted((ROOT / "tests" / "rules" / "attacks").glob("*.yaml")) + sorted(
    (ROOT / "tests" / "rules" / "allowed").glob("*.yaml")
)


def _policies(tenant: str) -> list[dict]:
    """The policies that judge pods (the ConfigMap guard is tests/bundle/test_kfpconfig.py's)."""
    files = render_bundle(load(tenant), BundleOptions())
    return [
        p
        for p in yaml.safe_load_all(files["validatingadmissionpolicy.yaml"])
        if "pods" in p["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
    ]


def _api_server(policies: list[dict], pod: dict, user: str = PIPELINE_RUNNER) -> list[str]:
    """The rule ids (message prefixes) of the failed validations, policy by policy, for a CREATE
    by `user` (`request.userInfo.username`)."""
    request = {"userInfo": {"username": user}}
    context = {"object": admission_view(pod), "oldObject": None, "request": request}
    failed = []
    for policy in policies:
        conditions = policy["spec"].get("matchConditions", [])
        if not all(compiled(c["expression"]).execute(context) is True for c in conditions):
            continue
        for validation in policy["spec"]["validations"]:
            if compiled(validation["expression"]).execute(context) is not True:
                failed.append(validation["message"].split(":", 1)[0])
    return failed


@pytest.mark.parametrize("tenant", ["team-a", "team-dra"])
def test_rendered_policies_judge_like_the_offline_engine(tenant: str) -> None:
    policies = _policies(tenant)
    assert [p["metadata"]["name"] for p in policies] == [
        f"secureml-{tenant}-validate-pods",
        f"secureml-{tenant}-validate-steps",
    ]
    rules = rules_for_profile(load(tenant))
    denied_by_forbidden_env_only = 0
    for path in CORPUS:
        for found in pods_in_text(Path(path).read_text(), source=str(path)):
            annotations = found.pod["metadata"].get("annotations", {})
            user = annotations.get("test.secureml.dev/created-by", PIPELINE_RUNNER)
            offline = sorted(v.rule for v in evaluate(found.pod, rules, created_by=user))
            assert sorted(_api_server(policies, found.pod, user)) == offline, path.name
            denied_by_forbidden_env_only += offline in (
                ["secureml.forbiddenEnv"],
                ["secureml.forbiddenEnv", "secureml.nvidiaEnv"],
                # KFP's driver does not set it either: the system pod is not its whole shape
                ["secureml.forbiddenEnv", "secureml.nvidiaEnv", "secureml.systemContainers"],
            )
    assert denied_by_forbidden_env_only >= 1  # the system pod with NVIDIA_VISIBLE_DEVICES


def test_the_driver_pod_skips_the_step_policy_only() -> None:
    policies = _policies("team-a")
    pod = yaml.safe_load((ROOT / "tests" / "rules" / "allowed" / "kfp-driver.yaml").read_text())
    del pod["metadata"]["labels"]
    context = {"object": admission_view(pod), "oldObject": None}  # a CREATE
    matched = [
        all(
            compiled(c["expression"]).execute(context) is True
            for c in p["spec"].get("matchConditions", [])
        )
        for p in policies
    ]
    assert matched == [True, False]
    assert _api_server(policies, pod) == []
