"""`cel_text.quote` read back by the API server's own CEL (cel-go), not only by the Python engines.

A ValidatingAdmissionPolicy compares each value of a ConfigMap with the literal `quote` wrote for
it: the server must accept the policy (every literal parses) and admit the ConfigMap that holds
exactly the strings (every literal means its string); a ConfigMap with one value changed is
refused, so the policy is known to be live.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from secureml.rules.cel.text import quote
from tests.harness.controlplane import ControlPlane
from tests.support.cel_strings import STRINGS

BASE = "/apis/admissionregistration.k8s.io/v1"


def _data(strings: list[str]) -> dict[str, str]:
    return {f"k{index}": text for index, text in enumerate(strings)}


def _policy(name: str, strings: list[str]) -> dict[str, Any]:
    validations = [
        {
            "expression": f"has(object.data) && {quote(key)} in object.data && "
            f"object.data[{quote(key)}] == {quote(text)}",
            "message": f"{key} differs",
        }
        for key, text in _data(strings).items()
    ]
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["configmaps"],
        }
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "validations": validations,
        },
    }


def _binding(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }


def _create(cluster: ControlPlane, namespace: str, data: dict[str, str]) -> tuple[int, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"generateName": "q-"},
        "data": data,
    }
    return cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)


def test_the_api_server_reads_every_quoted_string_back(k8s_cluster: ControlPlane) -> None:
    namespace = name = f"cel-quote-{uuid.uuid4().hex[:8]}"
    k8s_cluster.create_namespace(namespace)
    status, answer = k8s_cluster.request(
        "POST", f"{BASE}/validatingadmissionpolicies", _policy(name, STRINGS)
    )
    assert status == 201, answer
    status, answer = k8s_cluster.request(
        "POST", f"{BASE}/validatingadmissionpolicybindings", _binding(name, namespace)
    )
    assert status == 201, answer

    changed = _data(STRINGS) | {"k3": STRINGS[3] + "!"}
    # the informer sees a new binding within seconds (more on a loaded machine)
    deadline = time.monotonic() + 60
    while True:
        status, answer = _create(k8s_cluster, namespace, changed)
        if status != 201 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 422, answer
    assert "k3 differs" in answer["message"], answer
    assert "k2 differs" not in answer["message"], answer

    status, answer = _create(k8s_cluster, namespace, _data(STRINGS))
    assert status == 201, answer
    assert answer["data"] == _data(STRINGS)
