"""Pods out of manifests: every workload kind, multi-document files, stdin, unusable input."""

from __future__ import annotations

import io
import textwrap

import pytest

from secureml.core.errors import InputError
from secureml.pods.workloads import TEMPLATE_PATHS, pods_in_text, read_pods

POD_SPEC = {"containers": [{"name": "app", "image": "x"}]}
TEMPLATE = {"metadata": {"labels": {"app": "a"}, "annotations": {"k": "v"}}, "spec": POD_SPEC}


def _workload(kind: str) -> dict:
    obj: dict = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": f"{kind.lower()}-1", "namespace": "ns"},
    }
    path = TEMPLATE_PATHS[kind]
    if not path:
        return {**obj, "metadata": {**obj["metadata"], **TEMPLATE["metadata"]}, "spec": POD_SPEC}
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = TEMPLATE
    return obj


@pytest.mark.parametrize("kind", sorted(TEMPLATE_PATHS))
def test_each_kind_yields_its_pod(kind: str) -> None:
    import yaml

    (pod,) = list(pods_in_text(yaml.safe_dump(_workload(kind)), source="f.yaml"))
    assert (pod.kind, pod.name, pod.namespace, pod.doc_index) == (
        kind,
        f"{kind.lower()}-1",
        "ns",
        0,
    )
    assert pod.pod["kind"] == "Pod"
    assert pod.pod["spec"] == POD_SPEC
    assert pod.pod["metadata"]["labels"] == {"app": "a"}
    assert pod.pod["metadata"]["namespace"] == "ns"


def test_multi_document_list_and_other_kinds() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: ServiceAccount
        metadata: {name: sa}
        ---
        ---
        apiVersion: v1
        kind: List
        items:
        - {kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: x}]}}
        - {kind: ConfigMap, metadata: {name: cm}}
        ---
        kind: Job
        metadata: {name: j}
        spec: {template: {spec: {containers: [{name: c, image: x}]}}}
        """
    )
    pods = list(pods_in_text(text, source="m.yaml"))
    assert [(p.kind, p.name, p.doc_index) for p in pods] == [("Pod", "a", 2), ("Job", "j", 3)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: Pod\nspec: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "document 0: expected a Kubernetes object"),
        ("metadata: {name: x}\n", "document 0: the object has no kind"),
        ("kind: Pod\nmetadata: {name: x}\n", "document 0: the pod spec is missing"),
        (
            "kind: Pod\nspec: {containers: [{name: a}]}\n---\nkind: Pod\nspec: {containers: []}\n",
            "document 1: spec.containers must be a non-empty list",
        ),
        ("kind: Deployment\nspec: {}\n", "document 0: spec.template is missing"),
        (
            "kind: CronJob\nspec: {jobTemplate: {spec: {}}}\n",
            "spec.jobTemplate.spec.template is missing",
        ),
        (
            "kind: Pod\nspec: {containers: [{image: x}]}\n",
            "spec.containers[0] is not a container with a name",
        ),
        (
            "kind: Pod\nspec: {containers: [{name: a}], initContainers: {}}\n",
            "spec.initContainers is not a list",
        ),
    ],
)
def test_unusable_input_names_file_and_document(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as raised:
        list(pods_in_text(text, source="bad.yaml"))
    assert raised.value.exit_code == 2
    assert "bad.yaml" in raised.value.what and fragment in raised.value.what


def test_read_pods_from_stdin_and_files(tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("kind: Pod\nmetadata: {name: f}\nspec: {containers: [{name: c, image: x}]}\n")
    stdin = io.StringIO(
        "kind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c, image: x}]}\n"
    )
    pods = read_pods([str(path), "-"], stdin=stdin)
    assert [(p.name, p.file) for p in pods] == [("f", str(path)), ("s", "-")]
    with pytest.raises(InputError, match="no such file"):
        read_pods([str(tmp_path / "missing.yaml")])
    (tmp_path / "svc.yaml").write_text("kind: Service\nmetadata: {name: s}\n")
    with pytest.raises(InputError, match="no Pod or workload"):
        read_pods([str(tmp_path / "svc.yaml")])
