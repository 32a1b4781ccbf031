"""The field classification's check (secureml/pods/fields.py) finds an unclassified field.

The real schemas are read in tests/cluster/test_pod_fields.py; here a schema made from the table
itself passes, and the same schema with one field more (a next release's) fails, naming it.
"""

from __future__ import annotations

from typing import Any

from secureml.core import contract
from secureml.pods.fields import CLASSIFIED, unclassified
from secureml.rules import evaluate, rules_for_profile
from tests.rules.test_attacks import _pod
from tests.support.paths import ATTACKS_DIR
from tests.support.profiles import example_profile
from tests.support.submitted_pods import admitted


def _schemas() -> dict[str, Any]:
    return {
        f"io.k8s.api.core.v1.{name}": {"properties": {field: {} for field in table}}
        for name, table in CLASSIFIED.items()
    }


def test_a_schema_the_table_lists_passes() -> None:
    assert unclassified(_schemas()) == []


def test_a_new_field_fails_until_classified() -> None:
    schemas = _schemas()
    schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["podDoesSomethingNew"] = {"type": "object"}
    schemas["io.k8s.api.core.v1.Container"]["properties"]["containerHook"] = {"type": "object"}
    assert unclassified(schemas) == ["PodSpec.podDoesSomethingNew", "Container.containerHook"]
    del schemas["io.k8s.api.core.v1.VolumeMount"]
    assert "VolumeMount" in unclassified(schemas)


def test_the_pod_fields_rule_refuses_what_the_table_refuses() -> None:
    """Each field `secureml.podFields` holds, set on the allowed base pod: refused by that rule."""
    base = _pod(ATTACKS_DIR.parent / "allowed" / "team-a-timeslice.yaml")
    profile = example_profile("team-a")
    rules = rules_for_profile(profile)
    assert evaluate(admitted(base, profile), rules) == []
    changes = {
        "shareProcessNamespace": lambda p: p["spec"].update(shareProcessNamespace=True),
        "hostAliases": lambda p: p["spec"].update(
            hostAliases=[{"ip": "10.0.0.9", "hostnames": ["ml-pipeline.kubeflow"]}]
        ),
        "dnsPolicy": lambda p: p["spec"].update(
            dnsPolicy="None", dnsConfig={"nameservers": ["9.9.9.9"]}
        ),
        "terminationMessagePath": lambda p: p["spec"]["containers"][0].update(
            terminationMessagePath=contract.SHIM_PRELOAD_FILE
        ),
        "fileKeyRef": lambda p: p["spec"]["containers"][0]["env"].append(
            {
                "name": "STEP_SETTING",
                "valueFrom": {
                    "fileKeyRef": {"path": "x.env", "volumeName": "scratch-tmp", "key": "k"}
                },
            }
        ),
    }
    for name, change in changes.items():
        pod = _pod(ATTACKS_DIR.parent / "allowed" / "team-a-timeslice.yaml")
        change(pod)
        found = {v.rule: v.what for v in evaluate(admitted(pod, profile), rules)}
        assert "secureml.podFields" in found, name
        word = "dnsConfig" if name == "dnsPolicy" else name
        assert word in found["secureml.podFields"], (name, found["secureml.podFields"])
