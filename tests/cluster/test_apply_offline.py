"""secureml.cluster without a cluster: the messages for missing CRDs and APIs, server refusals,
denials mapped to rule ids, and the exit codes of an unreachable or unusable kubeconfig."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.admission.server import findings_of, psa_findings
from secureml.bundle import BundleOptions, render_objects
from secureml.cli import app
from secureml.cluster.apply import apply_order
from secureml.cluster.connection import Resource, ServerRefusedError
from secureml.cluster.refusal import refusal_error
from secureml.cluster.requirements import missing_kinds, requirement_error
from secureml.profile.model import load_profile

REPO = Path(__file__).resolve().parents[2]
TEAM_A = REPO / "profiles" / "team-a.yaml"


KINDS = (
    "Namespace", "Profile", "ResourceQuota", "LimitRange", "ServiceAccount", "Role", "RoleBinding",
    "NetworkPolicy", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ClusterImagePolicy",
    "ImageValidatingPolicy", "ClusterSPIFFEID", "ResourceClaimTemplate", "PrometheusRule",
)  # fmt: skip
MAP_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def _served_except(*absent: str) -> Callable[[str], dict[str, Resource] | None]:
    """A discovery stand-in: every group/version serves every kind of `KINDS`, except the
    `absent` group/versions ("g/v") and kinds ("g/v:Kind")."""

    def served(api_version: str) -> dict[str, Resource] | None:
        if api_version in absent:
            return None
        return {
            kind: Resource(kind.lower() + "s", namespaced=False)
            for kind in KINDS
            if f"{api_version}:{kind}" not in absent
        }

    return served


def _bundle(**options: object) -> list[dict]:
    return render_objects(load_profile(TEAM_A), BundleOptions(**options))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("api_version", "component", "alternative"),
    [
        ("spire.spiffe.io/v1alpha1", "SPIRE's spire-controller-manager", "identity.required"),
        ("policy.sigstore.dev/v1beta1", "Sigstore policy-controller", "--image-policy kyverno"),
        ("monitoring.coreos.com/v1", "Prometheus Operator", "monitoring.alerts: false"),
        ("kubeflow.org/v1", "Kubeflow", "--no-kubeflow-profile"),
    ],
)
def test_missing_crd_names_its_component(
    api_version: str, component: str, alternative: str
) -> None:
    objects = _bundle()
    served = _served_except(api_version)
    missing = missing_kinds(objects, served)
    assert [m.api_version for m in missing] == [api_version]
    error = requirement_error(missing, served, "v1.36.3")
    assert error.exit_code == 2
    text = error.diagnostics()
    assert f"{component}" in text and "is not installed" in text
    assert alternative in text
    assert "nothing was applied" in text


def test_missing_kyverno_names_kyverno() -> None:
    objects = _bundle(image_policy="kyverno")
    served = _served_except("policies.kyverno.io/v1")
    text = requirement_error(missing_kinds(objects, served), served, "v1.36.3").diagnostics()
    assert "Kyverno is not installed" in text and "ImageValidatingPolicy" in text


def test_every_missing_component_in_one_error() -> None:
    groups = ("spire.spiffe.io/v1alpha1", "policy.sigstore.dev/v1beta1", "kubeflow.org/v1")
    served = _served_except(*groups)
    missing = missing_kinds(_bundle(), served)
    text = requirement_error(missing, served, "v1.36.3").diagnostics()
    for name in ("SPIRE", "Sigstore policy-controller", "Kubeflow"):
        assert name in text


def test_map_beta_off_on_1_35_names_the_gate_and_the_runtime_config() -> None:
    served = _served_except(
        *(
            f"admissionregistration.k8s.io/{version}:{kind}"
            for kind in MAP_KINDS
            for version in ("v1", "v1beta1")
        )
    )
    missing = missing_kinds(_bundle(k8s_version="1.35"), served)
    assert {m.kind for m in missing} == {
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
    text = requirement_error(missing, served, "v1.35.2").diagnostics()
    assert "MutatingAdmissionPolicy is not served at admissionregistration.k8s.io/v1beta1" in text
    assert "--feature-gates=MutatingAdmissionPolicy=true" in text
    assert "--runtime-config=admissionregistration.k8s.io/v1beta1=true" in text


def test_map_v1_bundle_on_a_beta_server_says_which_version_to_render() -> None:
    served = _served_except(*(f"admissionregistration.k8s.io/v1:{kind}" for kind in MAP_KINDS))
    missing = missing_kinds(_bundle(k8s_version="1.36"), served)
    text = requirement_error(missing, served, "v1.35.2").diagnostics()
    assert "only the beta API" in text and "--k8s-version 1.35" in text


def test_apply_order_namespace_first_custom_resources_last() -> None:
    ordered = apply_order(_bundle())
    assert ordered[0]["kind"] == "Namespace"
    kinds = [obj["kind"] for obj in ordered]
    assert kinds.index("ValidatingAdmissionPolicy") < kinds.index(
        "ValidatingAdmissionPolicyBinding"
    )
    custom = {"Profile", "ClusterImagePolicy", "ClusterSPIFFEID", "PrometheusRule"}
    first_custom = min(kinds.index(kind) for kind in custom)
    assert all(kind in custom for kind in kinds[first_custom:])


def _status(code: int, reason: str, message: str, causes: list[dict]) -> ServerRefusedError:
    return ServerRefusedError(
        code,
        {"kind": "Status", "reason": reason, "message": message, "details": {"causes": causes}},
    )


def test_invalid_object_error_names_kind_name_field_and_server_message() -> None:
    expression = "object.spec.x ==" + " 'y'" * 200
    refusal = _status(
        422,
        "Invalid",
        f'ValidatingAdmissionPolicy "p" is invalid: spec.validations[0].expression: '
        f'Invalid value: "{expression}": compilation failed: ERROR: <input>:1:17: Syntax error',
        [
            {
                "reason": "FieldValueInvalid",
                "field": "spec.validations[0].expression",
                "message": f'Invalid value: "{expression}": compilation failed: '
                "ERROR: <input>:1:17: Syntax error: mismatched input\n | object.spec.x ==\n | ...^",
            }
        ],
    )
    obj = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy"}
    obj["metadata"] = {"name": "secureml-team-a-validate-pods"}
    text = refusal_error(obj, refusal, action="apply").diagnostics()
    assert "ValidatingAdmissionPolicy/secureml-team-a-validate-pods" in text
    assert "422 Invalid" in text
    assert "spec.validations[0].expression: Invalid value: compilation failed" in text
    assert "Syntax error" in text
    assert expression not in text  # the echoed value is left out
    assert " | " not in text


def test_conflict_error_names_the_other_manager_and_force() -> None:
    refusal = _status(
        409,
        "Conflict",
        'Apply failed with 1 conflict: conflict with "kubectl" using v1: '
        ".metadata.labels.pod-security.kubernetes.io/enforce",
        [
            {
                "type": "FieldManagerConflict",
                "message": 'conflict with "kubectl" using v1',
                "field": ".metadata.labels.pod-security.kubernetes.io/enforce",
            }
        ],
    )
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    text = refusal_error(obj, refusal, action="apply").diagnostics()
    assert "Namespace/team-a" in text
    assert '.metadata.labels.pod-security.kubernetes.io/enforce: conflict with "kubectl"' in text
    assert "--force-conflicts" in text


def test_conversion_webhook_down_names_the_component() -> None:
    refusal = _status(
        500,
        "",
        "conversion webhook for policy.sigstore.dev/v1beta1, Kind=ClusterImagePolicy failed: "
        'Post "https://webhook.cosign-system.svc:443/?timeout=30s": service "webhook" not found',
        [],
    )
    obj = {"apiVersion": "policy.sigstore.dev/v1beta1", "kind": "ClusterImagePolicy"}
    obj["metadata"] = {"name": "secureml-team-a-images"}
    text = refusal_error(obj, refusal, action="apply").diagnostics()
    assert "ClusterImagePolicy/secureml-team-a-images" in text
    assert "Sigstore policy-controller is installed but not running" in text


def _forbidden(message: str) -> ServerRefusedError:
    return _status(403, "Forbidden", message, [])


def test_vap_denial_maps_to_the_rule_id() -> None:
    refusal = _forbidden(
        "pods \"x\" is forbidden: ValidatingAdmissionPolicy 'secureml-team-a-validate-steps' "
        "with binding 'secureml-team-a-validate-steps' denied request: "
        'secureml.forbiddenEnv: container "main" sets LD_PRELOAD: no container may set it'
    )
    (finding,) = findings_of(refusal)
    assert finding.rule == "secureml.forbiddenEnv"
    assert finding.what == 'container "main" sets LD_PRELOAD: no container may set it'


def test_vap_expression_error_has_no_rule_id() -> None:
    refusal = _forbidden(
        "pods \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p' denied "
        "request: expression 'object.spec.x' resulted in error: no such key: x"
    )
    (finding,) = findings_of(refusal)
    assert finding.rule == "k8s.ValidatingAdmissionPolicy"
    assert finding.what.startswith("p: expression")


def test_pod_security_denial_maps_every_check() -> None:
    detail = (
        'allowPrivilegeEscalation != false (containers "a", "b" must set '
        "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities "
        '(container "a" must set securityContext.capabilities.drop=["ALL"]; container "b" must '
        'not include "SYS_ADMIN" in securityContext.capabilities.add), hostPort (container "a" '
        'uses hostPorts 80, 443), seccompProfile (pod or container "a" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    refusal = _forbidden(
        f'pods "x" is forbidden: violates PodSecurity "restricted:v1.36": {detail}'
    )
    assert [f.rule for f in findings_of(refusal)] == [
        "pss.allowPrivilegeEscalation",
        "pss.capabilities_restricted.dropAll",
        "pss.capabilities_restricted.add",
        "pss.hostPorts",
        "pss.seccompProfile_restricted",
    ]


def test_pod_security_titles_resolve_by_level() -> None:
    assert [
        f.rule for f in psa_findings("baseline", 'seccompProfile (pod must not set "Unconfined")')
    ] == ["pss.seccompProfile_baseline"]
    assert [f.rule for f in psa_findings("restricted", 'procMount (container "m")')] == [
        "pss.procMount_restricted"
    ]
    assert [f.rule for f in psa_findings("restricted", "something new (x)")] == ["k8s.PodSecurity"]


@pytest.mark.parametrize(
    ("message", "rule"),
    [
        (
            'pods "x" is forbidden: error looking up service account t/default: '
            'serviceaccount "default" not found',
            "k8s.ServiceAccount",
        ),
        (
            'pods "x" is forbidden: exceeded quota: q, requested: nvidia.com/gpu=2',
            "k8s.ResourceQuota",
        ),
        (
            'pods "x" is forbidden: [maximum cpu usage per Container is 2, but limit is 4]',
            "k8s.LimitRanger",
        ),
        ('pods "x" is forbidden: something else', "k8s.admission"),
    ],
)
def test_other_denials_name_who_refused(message: str, rule: str) -> None:
    assert [f.rule for f in findings_of(_forbidden(message))] == [rule]


def test_invalid_pod_is_denied_by_validation_with_each_field() -> None:
    refusal = _status(
        422,
        "Invalid",
        'Pod "x" is invalid: ...',
        [
            {"field": "spec.ephemeralContainers", "message": "Forbidden: cannot be set on create"},
            {"field": "spec.containers[0].image", "message": "Required value"},
        ],
    )
    findings = findings_of(refusal)
    assert [f.rule for f in findings] == ["k8s.validation", "k8s.validation"]
    assert findings[0].what == "spec.ephemeralContainers: Forbidden: cannot be set on create"


# --- the CLI: exit 2 when the cluster cannot be used ------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_profile_apply_unreachable_cluster_exits_2_naming_kubeconfig_and_server(
    tmp_path: Path,
) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = _kubeconfig(tmp_path, server)
    result = CliRunner().invoke(
        app, ["profile", "apply", str(TEAM_A), "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 2, result.output
    assert f"cannot reach the API server {server}" in result.output
    assert f"kubeconfig {kubeconfig}" in result.output
    assert "Traceback" not in result.output


def test_check_pod_server_unreachable_exits_2(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = _kubeconfig(tmp_path, server)
    pod = REPO / "tests" / "rules" / "allowed" / "team-a-cpu.yaml"
    result = CliRunner().invoke(
        app, ["check-pod", str(pod), "--server", "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 2, result.output
    assert f"cannot reach the API server {server}" in result.output


def test_missing_kubeconfig_and_unknown_context_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = tmp_path / "nope"
    result = runner.invoke(app, ["profile", "apply", str(TEAM_A), "--kubeconfig", str(missing)])
    assert result.exit_code == 2 and f"kubeconfig {missing}: no such file" in result.output
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:1")
    result = runner.invoke(
        app,
        ["profile", "apply", str(TEAM_A), "--kubeconfig", str(kubeconfig), "--context", "other"],
    )
    assert result.exit_code == 2, result.output
    assert "cannot use kubeconfig" in result.output and "context other" in result.output


def test_check_pod_server_refuses_offline_options() -> None:
    pod = REPO / "tests" / "rules" / "allowed" / "team-a-cpu.yaml"
    result = CliRunner().invoke(app, ["check-pod", str(pod), "--server", "--level", "restricted"])
    assert result.exit_code == 2
    assert "--server judges pods by the cluster's own policies" in result.output
    result = CliRunner().invoke(app, ["check-pod", str(pod), "--level", "restricted", "-n", "x"])
    assert result.exit_code == 2 and "need --server" in result.output
