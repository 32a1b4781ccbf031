"""Pod Security Standards 1.36 edge cases: exemptions, allowed-value lists, all container kinds;
the 1.37 revision where it differs (sysctls)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from secureml.core.k8s_versions import K8S_VERSIONS, at_least
from secureml.rules import evaluate, rules_for_level


def _container(name: str = "app") -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example/app:1",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def restricted_pod() -> dict[str, Any]:
    """The smallest pod restricted admits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [_container()],
        },
    }


def failed(pod: dict[str, Any], level: str) -> set[str]:
    return {v.rule for v in evaluate(pod, rules_for_level(level))}


def test_minimal_pods() -> None:
    assert failed(restricted_pod(), "restricted") == set()
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "x"}]}}
    assert failed(plain, "baseline") == set()
    assert failed(plain, "restricted") == {
        "pss.allowPrivilegeEscalation",
        "pss.runAsNonRoot",
        "pss.seccompProfile_restricted",
        "pss.capabilities_restricted.dropAll",
    }


def test_levels_partition_like_upstream() -> None:
    baseline = {r.id for r in rules_for_level("baseline")}
    restricted = {r.id for r in rules_for_level("restricted")}
    overridden = {
        "pss.hostPathVolumes",
        "pss.capabilities_baseline",
        "pss.seccompProfile_baseline",
        "pss.procMount",
    }
    assert overridden <= baseline and not overridden & restricted
    assert baseline - overridden <= restricted
    with pytest.raises(ValueError):
        rules_for_level("privileged")


def test_windows_pods_skip_linux_only_checks() -> None:
    pod = restricted_pod()
    pod["spec"]["os"] = {"name": "windows"}
    pod["spec"]["securityContext"] = {"runAsNonRoot": True}
    pod["spec"]["containers"] = [{"name": "w", "image": "x"}]
    assert failed(pod, "restricted") == set()
    pod["spec"]["securityContext"] = {}
    assert failed(pod, "restricted") == {"pss.runAsNonRoot"}  # not Linux-only


def test_user_namespace_relaxations() -> None:
    pod = restricted_pod()
    pod["spec"]["hostUsers"] = False
    pod["spec"]["securityContext"] = {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}
    assert failed(pod, "restricted") == set()  # runAsNonRoot and runAsUser skipped (policy 1.35)
    pod["spec"]["containers"][0]["securityContext"]["procMount"] = "Unmasked"
    assert "pss.procMount" not in failed(pod, "baseline")
    assert failed(pod, "restricted") == {"pss.procMount_restricted"}
    del pod["spec"]["hostUsers"]
    assert "pss.procMount" in failed(pod, "baseline")
    assert {"pss.runAsUser", "pss.runAsNonRoot"} <= failed(pod, "restricted")


def test_volume_types() -> None:
    pod = restricted_pod()
    pod["spec"]["volumes"] = [
        {"name": n, kind: body}
        for n, (kind, body) in enumerate(
            [
                ("image", {"reference": "registry.example/data:1"}),
                ("emptyDir", {}),
                ("ephemeral", {"volumeClaimTemplate": {"spec": {}}}),
                ("csi", {"driver": "csi.spiffe.io"}),
            ]
        )
    ]
    for v in pod["spec"]["volumes"]:
        v["name"] = f"v{v['name']}"
    assert failed(pod, "restricted") == set()
    git = copy.deepcopy(pod)
    git["spec"]["volumes"].append({"name": "g", "gitRepo": {"repository": "r"}})
    assert failed(git, "baseline") == set()  # no baseline volume check in 1.36
    assert failed(git, "restricted") == {"pss.restrictedVolumes"}
    host = copy.deepcopy(pod)
    host["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    assert failed(host, "baseline") == {"pss.hostPathVolumes"}


@pytest.mark.parametrize(
    ("name", "since"),
    [
        ("net.ipv4.tcp_rmem", "1.32"),
        ("net.ipv4.ip_local_reserved_ports", "1.27"),
        ("net.ipv4.tcp_keepalive_probes", "1.29"),
        ("net.ipv4.tcp_slow_start_after_idle", "1.37"),
        ("net.ipv4.tcp_notsent_lowat", "1.37"),
        ("kernel.msgmax", None),
    ],
)
@pytest.mark.parametrize("kubernetes", K8S_VERSIONS)
def test_sysctls(name: str, since: str | None, kubernetes: str) -> None:
    pod = restricted_pod()
    pod["spec"]["securityContext"]["sysctls"] = [{"name": name, "value": "1"}]
    allowed = since is not None and at_least(kubernetes, since)
    for level in ("baseline", "restricted"):
        violations = {v.rule for v in evaluate(pod, rules_for_level(level, kubernetes))}
        assert violations == (set() if allowed else {"pss.sysctls"}), (level, kubernetes)


@pytest.mark.parametrize(
    ("options", "allowed"),
    [
        ({"type": "container_engine_t"}, True),  # 1.31
        ({"type": "container_kvm_t", "level": "s0:c1"}, True),
        ({"type": ""}, True),
        ({"type": "spc_t"}, False),
        ({"user": "system_u"}, False),
        ({"role": "sysadm_r"}, False),
    ],
)
def test_selinux(options: dict[str, str], allowed: bool) -> None:
    for where in ("pod", "container"):
        pod = restricted_pod()
        target = (
            pod["spec"]["securityContext"]
            if where == "pod"
            else pod["spec"]["containers"][0]["securityContext"]
        )
        target["seLinuxOptions"] = options
        assert (failed(pod, "baseline") == set()) is allowed, where


def test_apparmor_field_and_annotation() -> None:
    pod = restricted_pod()
    pod["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/app": "localhost/prof"
    }
    pod["spec"]["securityContext"]["appArmorProfile"] = {
        "type": "Localhost",
        "localhostProfile": "p",
    }
    assert failed(pod, "baseline") == set()
    pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/app"] = (
        "unconfined"
    )
    assert failed(pod, "baseline") == {"pss.appArmorProfile"}
    pod["metadata"]["annotations"] = {}
    pod["spec"]["containers"][0]["securityContext"]["appArmorProfile"] = {"type": "Unconfined"}
    assert failed(pod, "baseline") == {"pss.appArmorProfile"}


def test_seccomp_inheritance() -> None:
    pod = restricted_pod()
    pod["spec"]["securityContext"] = {"runAsNonRoot": True}
    assert failed(pod, "restricted") == {"pss.seccompProfile_restricted"}
    pod["spec"]["containers"][0]["securityContext"]["seccompProfile"] = {
        "type": "Localhost",
        "localhostProfile": "x",
    }
    assert failed(pod, "restricted") == set()
    pod["spec"]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
    assert failed(pod, "restricted") == {
        "pss.seccompProfile_restricted"
    }  # pod level explicitly bad
    assert failed(pod, "baseline") == {"pss.seccompProfile_baseline"}


def test_every_container_kind_is_checked() -> None:
    for list_name in ("initContainers", "ephemeralContainers"):
        pod = restricted_pod()
        extra = _container("extra")
        extra["securityContext"]["privileged"] = True
        pod["spec"][list_name] = [extra]
        violations = evaluate(pod, rules_for_level("baseline"))
        assert [v.rule for v in violations] == ["pss.privileged"]
        assert '"extra"' in violations[0].what


def test_probe_and_lifecycle_hosts() -> None:
    pod = restricted_pod()
    container = pod["spec"]["containers"][0]
    container["readinessProbe"] = {"httpGet": {"port": 80, "host": ""}}
    assert failed(pod, "baseline") == set()
    container["lifecycle"] = {"preStop": {"tcpSocket": {"port": 80, "host": "10.0.0.1"}}}
    assert failed(pod, "baseline") == {"pss.hostProbesAndHostLifecycle"}


def test_host_port_zero_and_capabilities() -> None:
    pod = restricted_pod()
    container = pod["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 80, "hostPort": 0}]
    container["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    assert failed(pod, "restricted") == set()
    container["securityContext"]["capabilities"]["add"] = ["CHOWN"]
    assert failed(pod, "baseline") == set()
    assert failed(pod, "restricted") == {"pss.capabilities_restricted.add"}
    container["securityContext"]["capabilities"]["add"] = ["NET_RAW"]
    assert failed(pod, "baseline") == {"pss.capabilities_baseline"}


def test_null_fields_are_absent_as_in_the_api_server() -> None:
    pod = restricted_pod()
    pod["spec"]["hostNetwork"] = None
    pod["spec"]["containers"][0]["securityContext"]["privileged"] = None
    assert failed(pod, "restricted") == set()


def test_messages_name_the_container_or_pod() -> None:
    pod = restricted_pod()
    pod["spec"]["containers"].append({"name": "second", "image": "x"})
    pod["spec"]["hostPID"] = True
    messages = {v.rule: v.what for v in evaluate(pod, rules_for_level("restricted"))}
    assert messages["pss.allowPrivilegeEscalation"].startswith('container "second"')
    assert "hostPID=true" in messages["pss.hostNamespaces"]
