"""The bundle folder: contents per concern, determinism, kustomization, diff and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from secureml.bundle import BundleOptions, bundle_diff, render_bundle, write_bundle
from secureml.bundle.cel_layout import fold, tokens
from secureml.cli import app
from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules import rules_for_level, rules_for_profile
from secureml.rules.cel.text import quote
from secureml.rules.request import for_server
from secureml.rules.scope import EVERY_POD, STEP_POD
from tests.bundle.conftest import ROOT, load, rendered


def _objects(profile: TenantProfile, **options: object) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for obj in rendered(profile.metadata.name, BundleOptions(**options)):
        by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


def _changed(name: str, **changes: object) -> TenantProfile:
    """The example profile `name` with `spec` fields replaced (dotted paths)."""
    data = load(name).model_dump(by_alias=True, exclude_none=True)
    for dotted, value in changes.items():
        node = data["spec"]
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return TenantProfile.from_dict(data)


# --- determinism and layout -----------------------------------------------------------------


def test_rendering_is_deterministic(profile: TenantProfile, tmp_path: Path) -> None:
    first = write_bundle(profile, tmp_path / "one", BundleOptions())
    second = write_bundle(load(profile.metadata.name), tmp_path / "two", BundleOptions())
    names = sorted(path.name for path in first.iterdir())
    assert names == sorted(path.name for path in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_one_kind_per_file_and_kustomization_lists_them(profile: TenantProfile) -> None:
    files = render_bundle(profile, BundleOptions())
    kustomization = yaml.safe_load(files.pop("kustomization.yaml"))
    assert kustomization["resources"] == sorted(files)
    for name, text in files.items():
        kinds = {doc["kind"] for doc in yaml.safe_load_all(text)}
        assert len(kinds) == 1 and name == f"{kinds.pop().lower()}.yaml"


def test_no_timestamps_or_absolute_paths(profile: TenantProfile) -> None:
    text = "".join(render_bundle(profile, BundleOptions()).values())
    assert "creationTimestamp" not in text and str(ROOT) not in text


def test_no_yaml_anchors_or_aliases(profile: TenantProfile) -> None:
    """Shared sub-objects (the network policy's namespace selectors) are written out in full."""
    for name, text in render_bundle(profile, BundleOptions()).items():
        events = yaml.parse(text, Loader=yaml.SafeLoader)
        assert not [
            e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)
        ], name


def test_stale_files_from_an_earlier_render_are_removed(tmp_path: Path) -> None:
    folder = write_bundle(load("team-a"), tmp_path, BundleOptions())
    (folder / "notes.yaml").write_text("kept: true\n")  # not ours: left alone
    assert (folder / "prometheusrule.yaml").exists()
    write_bundle(_changed("team-a", **{"monitoring.alerts": False}), tmp_path, BundleOptions())
    assert not (folder / "prometheusrule.yaml").exists()
    assert (folder / "notes.yaml").exists()
    assert "prometheusrule.yaml" not in (folder / "kustomization.yaml").read_text()


# --- what each concern enforces -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36", "1.37"])
def test_namespace_pins_pod_security_restricted(version: str) -> None:
    (namespace,) = _objects(load("team-a"), k8s_version=version)["Namespace"]
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == f"v{version}"
    assert labels["policy.sigstore.dev/include"] == "true"
    assert namespace["metadata"]["annotations"]["owner"] == "alice@example.com"
    kyverno = _objects(load("team-a"), image_policy="kyverno")["Namespace"][0]
    assert "policy.sigstore.dev/include" not in kyverno["metadata"]["labels"]


def test_gpu_quota_uses_the_requests_prefix_in_both_forms() -> None:
    profile = load("team-a")
    expected = {f"requests.{name}": str(amount) for name, amount in profile.spec.gpu.quota.items()}
    (kf,) = _objects(profile)["Profile"]
    assert kf["metadata"]["name"] == profile.spec.namespace
    assert kf["spec"]["owner"] == {"kind": "User", "name": "alice@example.com"}
    assert kf["spec"]["resourceQuotaSpec"]["hard"] == expected
    plain = _objects(profile, kubeflow_profile=False)
    assert "Profile" not in plain
    assert plain["ResourceQuota"][0]["spec"]["hard"] == expected
    # No LimitRange: its `max` would default a GPU into every container (docs/bundle.md).
    assert "LimitRange" not in plain and "LimitRange" not in _objects(profile)


def test_runner_role_cannot_exec_or_change_pods(profile: TenantProfile) -> None:
    (role,) = _objects(profile)["Role"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if set(rule["resources"]) & {
            "pods",
            "pods/exec",
            "pods/attach",
            "pods/ephemeralcontainers",
        }:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert not {
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "pods/ephemeralcontainers",
        } & set(rule["resources"])
        if rule["resources"] in (["secrets"], ["configmaps"]):
            assert rule["verbs"] == ["get"] and rule["resourceNames"]
    (binding,) = _objects(profile)["RoleBinding"]
    assert (
        binding["subjects"][0]["name"] == _objects(profile)["ServiceAccount"][0]["metadata"]["name"]
    )


def test_network_policies_default_deny_then_allow_list() -> None:
    profile = load("team-a")
    policies = {
        p["metadata"]["name"]: p["spec"]
        for p in _objects(profile, api_server_cidrs=("10.96.0.1/32",))["NetworkPolicy"]
    }
    # KFP's driver pods carry no secureml labels: the deny and the platform allowances hold for
    # every pod of the namespace, the tenant's own egress allowlist only for its secure steps.
    for name, spec in policies.items():
        step_only = name == "secureml-allow-egress"
        assert spec["podSelector"] == (
            {"matchLabels": {contract.LABEL_TENANT: "team-a"}} if step_only else {}
        )
    deny = policies["secureml-default-deny"]
    assert (
        deny["policyTypes"] == ["Ingress", "Egress"]
        and "ingress" not in deny
        and "egress" not in deny
    )
    assert not any("ingress" in spec for spec in policies.values())
    assert policies["secureml-allow-egress"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    ]
    kfp = policies["secureml-allow-kfp"]["egress"]
    assert all(
        rule["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        == "kubeflow"
        for rule in kfp
    )
    assert policies["secureml-allow-apiserver"]["egress"][0]["to"] == [
        {"ipBlock": {"cidr": "10.96.0.1/32"}}
    ]
    assert "secureml-allow-egress" not in {
        p["metadata"]["name"] for p in _objects(load("team-conf"))["NetworkPolicy"]
    }


def _cel_tokens(expression: str) -> list[str]:
    return [token.text for token in tokens(expression)]


def test_validating_policy_is_the_rule_catalogue(profile: TenantProfile) -> None:
    """Two policies, one per rule scope: every pod (no match condition) and the step pods (the
    scope as the only matchCondition); together they hold every rule once, in catalogue order."""
    # The ConfigMap guard beside them is tests/bundle/test_kfpconfig.py's.
    guard = "-kfp-metadata-configmap"
    policies = {
        p["metadata"]["name"]: p
        for p in _objects(profile)["ValidatingAdmissionPolicy"]
        if not p["metadata"]["name"].endswith(guard)
    }
    tenant = profile.metadata.name
    assert sorted(policies) == [
        f"secureml-{tenant}-validate-pods",
        f"secureml-{tenant}-validate-steps",
    ]
    rules = rules_for_profile(profile)
    every_pod = policies[f"secureml-{tenant}-validate-pods"]
    steps = policies[f"secureml-{tenant}-validate-steps"]
    assert "matchConditions" not in every_pod["spec"]
    [condition] = steps["spec"]["matchConditions"]
    assert condition["name"] == "secureml-step-pod"
    assert _cel_tokens(condition["expression"]) == _cel_tokens(STEP_POD)
    for policy, scope in ((every_pod, EVERY_POD), (steps, STEP_POD)):
        in_scope = [rule for rule in rules if rule.scope == scope]
        validations = policy["spec"]["validations"]
        # the rules' own CEL as the server reads it, only laid out over lines (cel_layout)
        assert [v["expression"] for v in validations] == [
            fold(for_server(rule.expression)) for rule in in_scope
        ]
        for validation, rule in zip(validations, in_scope, strict=True):
            assert _cel_tokens(validation["expression"]) == _cel_tokens(for_server(rule.expression))
            assert validation["message"].startswith(f"{rule.id}: ")
            assert _cel_tokens(validation["messageExpression"]) == _cel_tokens(
                f"{quote(rule.id + ': ')} + ({for_server(rule.message_expression)})"
            )
            assert validation["reason"] == "Forbidden"
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["matchConstraints"]["resourceRules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "pods/ephemeralcontainers", "pods/resize"],
            }
        ]
    pss = [rule.id for rule in rules_for_level("restricted")]
    assert [r.id for r in rules if r.scope == EVERY_POD] == [
        *pss,
        "secureml.linuxOnly",
        "secureml.runAsNonRoot",
        "secureml.imageRegistry",
        "secureml.imageDigest",
        "secureml.forbiddenEnv",
        "secureml.envFrom",
        "secureml.nvidiaEnv",
        "secureml.nodeName",
        "secureml.tolerations",
        "secureml.nodeSelector",
        "secureml.nodeAffinity",
        "secureml.podAffinityNamespaces",
        "secureml.priorityClass",
        "secureml.schedulerName",
        "secureml.runtimeClass",
        "secureml.csiVolume",
        "secureml.imageVolume",
        "secureml.ephemeralVolume",
        "secureml.systemContainers",
        "secureml.podFields",
        "secureml.loaderEnv",
        "secureml.serviceAccount",
        "secureml.groupNotRoot",
        "secureml.platformMetadataImmutable",
        "secureml.pipelineIdentity",
    ]
    assert all(r.id.startswith("secureml.") for r in rules if r.scope == STEP_POD)
    if tenant == "team-a":
        assert [r.id for r in rules if r.scope == STEP_POD] == [
            "secureml.requiredLabels",
            "secureml.isolationLevel",
            "secureml.isolationMatchesGpu",
            "secureml.gpuResourceName",
            "secureml.migProfile",
            "secureml.wholeGpuCount",
            "secureml.dedicatedPool",
            "secureml.timeSliceCount",
            "secureml.resourceClaims",
            "secureml.shimLimits",
            "secureml.gpuRequest",
            "secureml.readOnlyRootFilesystem",
            "secureml.resourceName",
            "secureml.gpuCount",
            "secureml.gpuFreeOffGpuNodes",
            "secureml.tenantContainers",
            "secureml.launcherArgv",
            "secureml.runtimeInjected",  # team-a names runtime.image
            "secureml.launcherEnv",
            "secureml.interpreterEnv",
            "secureml.gpuMatchesRequest",
            "secureml.mountPaths",
            "secureml.modelcar",
            "secureml.noExecHandlers",
            "secureml.noDebugPause",
            "secureml.noRestart",
            "secureml.trainerNode",
        ]
    bindings = {
        b["spec"]["policyName"]: b
        for b in _objects(profile)["ValidatingAdmissionPolicyBinding"]
        if b["spec"]["policyName"] in policies
    }
    assert sorted(bindings) == sorted(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())


@pytest.mark.parametrize(
    ("version", "api"),
    [("1.34", "v1beta1"), ("1.35", "v1beta1"), ("1.36", "v1"), ("1.37", "v1")],
)
def test_mutating_policy_api_version_follows_kubernetes(version: str, api: str) -> None:
    objects = _objects(load("team-a"), k8s_version=version)
    for kind in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"):
        assert objects[kind][0]["apiVersion"] == f"admissionregistration.k8s.io/{api}"
    spec = objects["MutatingAdmissionPolicy"][0]["spec"]
    assert spec["reinvocationPolicy"] == "Never" and spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]


def test_image_policy_trusts_the_profile_signers_and_kfp_images() -> None:
    profile = load("team-a")
    # and the runtime image's own policy (team-a names runtime.image): tests/bundle/test_runtime_*
    tenant, system, _runtime = sorted(
        _objects(profile)["ClusterImagePolicy"], key=lambda p: p["metadata"]["name"]
    )
    assert tenant["spec"]["images"] == [{"glob": "ghcr.io/acme/**"}]
    (authority,) = tenant["spec"]["authorities"]
    assert authority["signatureFormat"] == "bundle"
    assert authority["keyless"]["identities"] == [
        {
            "issuer": "https://token.actions.githubusercontent.com",
            "subjectRegExp": r"^https://github\.com/acme/",
        }
    ]
    assert tenant["spec"]["match"][0]["selector"] == {
        "matchLabels": {contract.LABEL_TENANT: "team-a"}
    }
    assert {g["glob"] for g in system["spec"]["images"]} == {
        f"{r}{start}*" for r in contract.KFP_SYSTEM_IMAGES for start in (":", "@")
    }
    assert system["spec"]["authorities"] == [{"name": "kfp-system", "static": {"action": "pass"}}]
    (ivp,) = _objects(profile, image_policy="kyverno")["ImageValidatingPolicy"]
    assert (
        ivp["spec"]["attestors"][0]["cosign"]["keyless"]["identities"]
        == authority["keyless"]["identities"]
    )
    assert ivp["spec"]["matchImageReferences"] == [{"glob": "ghcr.io/acme/**"}]


def test_alerts_cover_the_four_dcgm_signals() -> None:
    (rule,) = _objects(load("team-a"))["PrometheusRule"]
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert (
        'DCGM_FI_DEV_XID_ERRORS{namespace="team-a"} > 0 unless'
        in alerts["SecuremlGpuXidError"]["expr"]
    )
    assert (
        "increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER" in alerts["SecuremlGpuPcieReplayErrors"]["expr"]
    )
    assert alerts["SecuremlGpuPcieReplayErrors"]["expr"].endswith("[1m])) > 100")
    copy_util = alerts["SecuremlGpuMemoryCopyUtilisationHigh"]
    assert copy_util["expr"].endswith("> 90") and copy_util["for"] == "5m"
    assert alerts["SecuremlGpuFramebufferOverTenantLimit"]["expr"].endswith(
        "> 16384"
    )  # 16Gi in MiB
    conf = _objects(load("team-conf"))["PrometheusRule"][0]["spec"]["groups"][0]["rules"]
    assert "SecuremlGpuFramebufferOverTenantLimit" not in {
        r["alert"] for r in conf
    }  # no time-slicing


# --- diff and CLI -------------------------------------------------------------------------------


def test_diff_shows_what_a_profile_change_does() -> None:
    old = load("team-a")
    assert bundle_diff(old, load("team-a"), BundleOptions()) == ""
    new = _changed("team-a", **{"network.egress": [{"cidr": "192.168.0.0/16", "ports": [5432]}]})
    text = bundle_diff(old, new, BundleOptions())
    assert "--- a/team-a/networkpolicy.yaml" in text and "+++ b/team-a/networkpolicy.yaml" in text
    assert "-        cidr: 10.0.0.0/8" in text and "+        cidr: 192.168.0.0/16" in text
    assert "profile.yaml" not in text
    removed = bundle_diff(old, _changed("team-a", **{"monitoring.alerts": False}), BundleOptions())
    assert "+++ /dev/null" in removed and "-- prometheusrule.yaml" in removed


def test_cli_render_and_diff(tmp_path: Path) -> None:
    runner = CliRunner()
    profiles = [str(ROOT / "profiles" / "team-a.yaml"), str(ROOT / "profiles" / "team-dra.yaml")]
    result = runner.invoke(
        app,
        [
            "profile",
            "render",
            *profiles,
            "-o",
            str(tmp_path),
            "--k8s-version",
            "1.34",
            "--image-policy",
            "kyverno",
            "--no-kubeflow-profile",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "team-a" / "resourcequota.yaml").exists()
    assert (tmp_path / "team-dra" / "resourceclaimtemplate.yaml").exists()
    assert "v1beta1" in (tmp_path / "team-a" / "mutatingadmissionpolicy.yaml").read_text()

    same = runner.invoke(app, ["profile", "diff", profiles[0], profiles[0]])
    assert same.exit_code == 0 and "no change" in same.output
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        (ROOT / "profiles" / "team-a.yaml").read_text().replace("maxCompute: 50", "maxCompute: 40")
    )
    differs = runner.invoke(app, ["profile", "diff", profiles[0], str(changed)])
    assert differs.exit_code == 1
    assert "  spec.gpu.timeSlice.maxCompute: 50 -> 40\n" in differs.output
    assert "  secureml.shimLimits: now allows something else\n" in differs.output
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: secureml.dev/v1alpha1\nkind: TenantProfile\nmetadata: {name: x}\nspec: {}\n"
    )
    assert runner.invoke(app, ["profile", "diff", profiles[0], str(broken)]).exit_code == 2
    assert (
        runner.invoke(app, ["profile", "render", str(broken), "-o", str(tmp_path)]).exit_code != 0
    )


def test_trusted_root_choices(tmp_path: Path) -> None:
    from secureml.bundle import imagepolicy

    staging = _changed("team-a", **{"images.signatures.trustedRoot": "staging"})
    (cip, _, _runtime) = imagepolicy.render(staging, BundleOptions())
    authority = cip["spec"]["authorities"][0]
    assert (
        authority["keyless"]["trustRootRef"]
        == authority["ctlog"]["trustRootRef"]
        == "sigstore-staging"
    )
    assert authority["keyless"]["url"] == "https://fulcio.sigstage.dev"
    root = tmp_path / "trusted_root.json"
    root.write_text('{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}')
    private = _changed("team-a", **{"images.signatures.trustedRoot": str(root)})
    (ivp,) = imagepolicy.render(private, BundleOptions(image_policy="kyverno"))
    assert ivp["spec"]["attestors"][0]["cosign"]["trustedRoot"] == {"value": root.read_text()}
    (cip, _, _runtime) = imagepolicy.render(private, BundleOptions())
    assert cip["spec"]["authorities"][0]["keyless"]["trustRootRef"] == "secureml-team-a-trust-root"
    unsigned = _changed("team-a", **{"images.signatures.required": False})
    (cip, _, _runtime) = imagepolicy.render(unsigned, BundleOptions())
    assert cip["spec"]["authorities"] == [
        {"name": "unsigned-allowed", "static": {"action": "pass"}}
    ]
    assert imagepolicy.render(unsigned, BundleOptions(image_policy="kyverno")) == []


def test_supported_versions_are_one_list() -> None:
    """The CLI's --k8s-version choices are the bundle's supported versions."""
    from typing import get_args

    from secureml.bundle.common import K8S_VERSIONS
    from secureml.cli.options import K8sVersionOption

    (option_type, _) = get_args(K8sVersionOption)
    assert get_args(option_type) == K8S_VERSIONS
    assert K8S_VERSIONS[-1] == "1.37"


@pytest.mark.parametrize(("version", "allowed"), [("1.36", False), ("1.37", True)])
def test_validating_policy_follows_the_pod_security_revision(version: str, allowed: bool) -> None:
    """A 1.37 bundle's policy admits the sysctls Pod Security 1.37 allows; a 1.36 one does not."""
    (policy,) = [
        p
        for p in _objects(load("team-a"), k8s_version=version)["ValidatingAdmissionPolicy"]
        if p["metadata"]["name"].endswith("validate-pods")
    ]
    (sysctls,) = [
        v for v in policy["spec"]["validations"] if v["message"].startswith("pss.sysctls:")
    ]
    for name in ("net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"):
        assert (f"'{name}'" in sysctls["expression"]) is allowed
