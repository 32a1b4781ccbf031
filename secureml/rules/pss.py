"""The Pod Security Standards of Kubernetes 1.34 to 1.37, one rule per upstream check."""

from __future__ import annotations

import functools

from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, at_least
from secureml.rules.cel.reference import (
    SPEC,
    container_rule_message,
    every_container,
    field,
    has_path,
    inherited_setting,
    is_true,
    spec_bound,
    spec_bound_message,
)
from secureml.rules.cel.text import quote, string_list
from secureml.rules.model import LEVEL_BASELINE, LEVEL_RESTRICTED, Rule

# --- allowed values (the upstream sets, as of 1.36; 1.37 changes below) -------------------------
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)  # fmt: skip
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
# Pod Security 1.37 (sysctls check revision v1.37) allows these too.
SAFE_SYSCTLS_1_37 = (
    *SAFE_SYSCTLS,
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
)
RESTRICTED_VOLUME_TYPES = (
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
    "persistentVolumeClaim", "projected", "secret",
)  # fmt: skip
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost")
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"

_POD_SC = f"{SPEC}.securityContext"
_C_SC = "c.securityContext"
_BOTH = (LEVEL_BASELINE, LEVEL_RESTRICTED)
_RESTRICTED = (LEVEL_RESTRICTED,)

# `spec.os.name: windows`: restricted's Linux-only checks do not apply (policy 1.25+).
_WINDOWS = f"({has_path(SPEC, 'os', 'name')} && {SPEC}.os.name == 'windows')"
# `spec.hostUsers: false`: the pod runs in a user namespace (policy 1.35 relaxations).
_USER_NAMESPACE = f"(has({SPEC}.hostUsers) && {SPEC}.hostUsers == false)"


def _user_namespace_exempt(kubernetes: str) -> str:
    """The user-namespace relaxation of procMount (baseline), runAsNonRoot and runAsUser: policy
    1.35 and newer. Before it only the alpha gate UserNamespacesPodSecurityStandards (off by
    default) relaxed them, and Kubernetes' 1.34 fixtures deny an Unmasked procMount with
    `hostUsers: false` (tests/rules/test_psa_upstream_fixtures.py)."""
    return _USER_NAMESPACE if at_least(kubernetes, "1.35") else "false"


def _levels(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"level:{name}" for name in names)


def _container_rule(
    rule_id: str, message: str, predicate: str, levels: tuple[str, ...], *,
    pod_part: str = "true", exempt: str = "false", pod_message: str | None = None,
) -> Rule:  # fmt: skip
    """A rule that holds when `pod_part` holds and `predicate` holds for every container."""
    expression = every_container(predicate)
    if pod_part != "true":
        expression = f"{pod_part} && {expression}"
    if exempt != "false":
        expression = f"{exempt} || ({expression})"
    return Rule(
        id=rule_id,
        message=message,
        expression=spec_bound(expression),
        message_expression=spec_bound_message(
            container_rule_message(predicate, message, pod_message)
        ),
        applies_to=_levels(levels),
    )


def _pod_rule(rule_id: str, message: str, expression: str, message_expression: str,
              levels: tuple[str, ...]) -> Rule:  # fmt: skip
    return Rule(
        rule_id,
        message,
        spec_bound(expression),
        spec_bound_message(message_expression),
        _levels(levels),
    )


def _not_true(root: str, *fields: str) -> str:
    return f"!{is_true(root, *fields)}"


def _seccomp_valid(root: str) -> str:
    return f"(has({root}.seccompProfile.type) && {root}.seccompProfile.type in {string_list(SECCOMP_TYPES)})"


def _selinux_valid(options: str) -> str:
    return (
        f"((!has({options}.type) || {options}.type in {string_list(SELINUX_TYPES)}) && "
        f"(!has({options}.user) || {options}.user == '') && "
        f"(!has({options}.role) || {options}.role == ''))"
    )


def _apparmor_valid(root: str) -> str:
    return f"(has({root}.appArmorProfile.type) && {root}.appArmorProfile.type in {string_list(APPARMOR_TYPES)})"


def _no_host(handler: str) -> str:
    """A probe or lifecycle handler sets no `host` on httpGet or tcpSocket."""
    return (
        f"(!has({handler}) || ("
        f"(!{has_path(handler, 'httpGet', 'host')} || {handler}.httpGet.host == '') && "
        f"(!{has_path(handler, 'tcpSocket', 'host')} || {handler}.tcpSocket.host == '')))"
    )


def _host_namespaces() -> Rule:
    flags = ("hostNetwork", "hostPID", "hostIPC")
    expression = " && ".join(_not_true(SPEC, flag) for flag in flags)
    message = " + ".join(f"({is_true(SPEC, flag)} ? ' {flag}=true' : '')" for flag in flags)
    return _pod_rule(
        "pss.hostNamespaces",
        "pod must not share the host's network, PID or IPC namespace",
        expression,
        f"'pod must not share host namespaces:' + {message}",
        _BOTH,
    )


def _privileged() -> Rule:
    return _container_rule(
        "pss.privileged",
        "must not set securityContext.privileged=true",
        _not_true("c", "securityContext", "privileged"),
        _BOTH,
    )


def _capabilities_baseline() -> Rule:
    add = f"{_C_SC}.capabilities.add"
    predicate = f"(!({has_path('c', 'securityContext', 'capabilities', 'add')}) || {add}.all(cap, cap in {string_list(BASELINE_CAPABILITIES)}))"
    return _container_rule(
        "pss.capabilities_baseline",
        "must not add capabilities beyond the baseline set "
        "(AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, "
        "SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT)",
        predicate,
        (LEVEL_BASELINE,),
    )


def _host_path_volumes() -> Rule:
    volumes = f"{SPEC}.volumes"
    bad = f"{volumes}.filter(v, has(v.hostPath)).map(v, v.name)"
    return _pod_rule(
        "pss.hostPathVolumes",
        "pod must not use hostPath volumes",
        f"!has({volumes}) || {volumes}.all(v, !has(v.hostPath))",
        f"'volume \"' + {bad}[0] + '\" must not be a hostPath volume'",
        (LEVEL_BASELINE,),
    )


def _host_ports() -> Rule:
    return _container_rule(
        "pss.hostPorts",
        "must not set ports[].hostPort",
        "(!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
        _BOTH,
    )


def _app_armor() -> Rule:
    annotations = "object.metadata.annotations"
    annotation_ok = (
        f"(!has({annotations}) || {annotations}.all(k, !k.startsWith({quote(APPARMOR_ANNOTATION_PREFIX)}) || "
        f"{annotations}[k] == '' || {annotations}[k] == 'runtime/default' || {annotations}[k].startsWith('localhost/')))"
    )
    pod_ok = (
        f"(!{has_path(SPEC, 'securityContext', 'appArmorProfile')} || {_apparmor_valid(_POD_SC)})"
    )
    container_ok = (
        f"(!{has_path('c', 'securityContext', 'appArmorProfile')} || {_apparmor_valid(_C_SC)})"
    )
    return _container_rule(
        "pss.appArmorProfile",
        "must not set an AppArmor profile other than RuntimeDefault or Localhost",
        container_ok,
        _BOTH,
        pod_part=f"{annotation_ok} && {pod_ok}",
        pod_message="pod must not set an AppArmor profile (field or annotation) other than "
        "RuntimeDefault / runtime/default or Localhost / localhost/*",
    )


def _selinux() -> Rule:
    pod_ok = f"(!{has_path(SPEC, 'securityContext', 'seLinuxOptions')} || {_selinux_valid(_POD_SC + '.seLinuxOptions')})"
    container_ok = f"(!{has_path('c', 'securityContext', 'seLinuxOptions')} || {_selinux_valid(_C_SC + '.seLinuxOptions')})"
    return _container_rule(
        "pss.seLinuxOptions",
        "must not set seLinuxOptions user or role, or a type other than container_t, "
        "container_init_t, container_kvm_t or container_engine_t",
        container_ok,
        _BOTH,
        pod_part=pod_ok,
        pod_message="pod must not set seLinuxOptions user or role, or a type outside the allowed list",
    )


def _proc_mount_predicate() -> str:
    return f"(!{has_path('c', 'securityContext', 'procMount')} || {_C_SC}.procMount == 'Default')"


def _proc_mount_baseline(kubernetes: str) -> Rule:
    exempt = _user_namespace_exempt(kubernetes)
    unless = " (unless hostUsers: false)" if exempt != "false" else ""
    return _container_rule(
        "pss.procMount",
        f"must not set securityContext.procMount other than Default{unless}",
        _proc_mount_predicate(),
        (LEVEL_BASELINE,),
        exempt=exempt,
    )


def _proc_mount_restricted() -> Rule:
    return _container_rule(
        "pss.procMount_restricted",
        "must not set securityContext.procMount other than Default",
        _proc_mount_predicate(),
        _RESTRICTED,
    )


def _seccomp_baseline() -> Rule:
    pod_ok = (
        f"(!{has_path(SPEC, 'securityContext', 'seccompProfile')} || {_seccomp_valid(_POD_SC)})"
    )
    container_ok = (
        f"(!{has_path('c', 'securityContext', 'seccompProfile')} || {_seccomp_valid(_C_SC)})"
    )
    return _container_rule(
        "pss.seccompProfile_baseline",
        "must not set securityContext.seccompProfile.type other than RuntimeDefault or Localhost",
        container_ok,
        (LEVEL_BASELINE,),
        pod_part=pod_ok,
        pod_message="pod must not set securityContext.seccompProfile.type to Unconfined",
    )


def _inheriting_rule(
    rule_id: str, message: str, *, pod_sets: str, pod_ok: str, if_pod_sets: str, otherwise: str,
    exempt: str, pod_message: str,
) -> Rule:  # fmt: skip
    """A restricted rule whose container setting may come from the pod (seccomp, runAsNonRoot)."""
    containers, message_shape = inherited_setting(pod_sets, if_pod_sets, otherwise)
    message_expression = message_shape % (
        container_rule_message(if_pod_sets, message, pod_message),
        container_rule_message(otherwise, message, pod_message),
    )
    return Rule(
        id=rule_id,
        message=message,
        expression=spec_bound(
            f"{pod_ok} && {containers}"
            if exempt == "false"
            else f"{exempt} || ({pod_ok} && {containers})"
        ),
        message_expression=spec_bound_message(message_expression),
        applies_to=_levels(_RESTRICTED),
    )


def _seccomp_restricted() -> Rule:
    pod_set = has_path(SPEC, "securityContext", "seccompProfile")
    container_set = has_path("c", "securityContext", "seccompProfile")
    return _inheriting_rule(
        "pss.seccompProfile_restricted",
        "must set securityContext.seccompProfile.type to RuntimeDefault or Localhost "
        "(or inherit it from the pod)",
        pod_sets=f"{pod_set} && {_seccomp_valid(_POD_SC)}",
        pod_ok=f"(!{pod_set} || {_seccomp_valid(_POD_SC)})",
        if_pod_sets=f"(!{container_set} || {_seccomp_valid(_C_SC)})",
        otherwise=f"({container_set} && {_seccomp_valid(_C_SC)})",
        exempt=_WINDOWS,
        pod_message="pod must not set securityContext.seccompProfile.type to Unconfined",
    )


def safe_sysctls(kubernetes: str) -> tuple[str, ...]:
    """The sysctls Pod Security allows on an API server of version `kubernetes`."""
    return SAFE_SYSCTLS_1_37 if at_least(kubernetes, "1.37") else SAFE_SYSCTLS


def _sysctls(kubernetes: str) -> Rule:
    sysctls = f"{_POD_SC}.sysctls"
    safe = string_list(safe_sysctls(kubernetes))
    return _pod_rule(
        "pss.sysctls",
        "pod must not set sysctls outside the safe set",
        f"!({has_path(SPEC, 'securityContext', 'sysctls')}) || {sysctls}.all(s, s.name in {safe})",
        f"'pod must not set sysctl \"' + {sysctls}.filter(s, !(s.name in {safe}))[0].name + '\"'",
        _BOTH,
    )


def _windows_host_process() -> Rule:
    return _container_rule(
        "pss.windowsHostProcess",
        "must not set securityContext.windowsOptions.hostProcess=true",
        _not_true("c", "securityContext", "windowsOptions", "hostProcess"),
        _BOTH,
        pod_part=_not_true(SPEC, "securityContext", "windowsOptions", "hostProcess"),
        pod_message="pod must not set securityContext.windowsOptions.hostProcess=true",
    )


def _host_probes() -> Rule:
    handlers = [f"c.{probe}" for probe in ("livenessProbe", "readinessProbe", "startupProbe")]
    handlers += [f"c.lifecycle.{hook}" for hook in ("postStart", "preStop")]
    probes = " && ".join(_no_host(h) for h in handlers[:3])
    hooks = " && ".join(_no_host(h) for h in handlers[3:])
    predicate = f"({probes} && (!has(c.lifecycle) || ({hooks})))"
    return _container_rule(
        "pss.hostProbesAndHostLifecycle",
        "must not set a host on probes or lifecycle handlers",
        predicate,
        _BOTH,
    )


def _restricted_volumes() -> Rule:
    volumes = f"{SPEC}.volumes"
    allowed = " || ".join(f"has(v.{kind})" for kind in RESTRICTED_VOLUME_TYPES)
    return _pod_rule(
        "pss.restrictedVolumes",
        "pod must only use volumes of the types configMap, csi, downwardAPI, emptyDir, ephemeral, "
        "image, persistentVolumeClaim, projected, secret",
        f"!has({volumes}) || {volumes}.all(v, {allowed})",
        f"'volume \"' + {volumes}.filter(v, !({allowed}))[0].name + '\" uses a restricted volume type'",
        _RESTRICTED,
    )


def _allow_privilege_escalation() -> Rule:
    return _container_rule(
        "pss.allowPrivilegeEscalation",
        "must set securityContext.allowPrivilegeEscalation=false",
        f"({has_path('c', 'securityContext', 'allowPrivilegeEscalation')} && {_C_SC}.allowPrivilegeEscalation == false)",
        _RESTRICTED,
        exempt=_WINDOWS,
    )


def _run_as_non_root(kubernetes: str) -> Rule:
    pod_set = has_path(SPEC, "securityContext", "runAsNonRoot")
    container_set = has_path("c", "securityContext", "runAsNonRoot")
    return _inheriting_rule(
        "pss.runAsNonRoot",
        "must set securityContext.runAsNonRoot=true (on the pod or the container)",
        pod_sets=f"{pod_set} && {_POD_SC}.runAsNonRoot == true",
        pod_ok=f"!({pod_set} && {_POD_SC}.runAsNonRoot == false)",
        if_pod_sets=f"(!{container_set} || {_C_SC}.runAsNonRoot == true)",
        otherwise=f"({container_set} && {_C_SC}.runAsNonRoot == true)",
        exempt=_user_namespace_exempt(kubernetes),
        pod_message="pod must not set securityContext.runAsNonRoot=false",
    )


def _run_as_user(kubernetes: str) -> Rule:
    def not_root(root: str, *path: str) -> str:
        return f"!({has_path(root, *path, 'runAsUser')} && {field(root, *path, 'runAsUser')} == 0)"

    return _container_rule(
        "pss.runAsUser",
        "must not set runAsUser=0",
        not_root("c", "securityContext"),
        _RESTRICTED,
        pod_part=not_root(SPEC, "securityContext"),
        exempt=_user_namespace_exempt(kubernetes),
        pod_message="pod must not set securityContext.runAsUser=0",
    )


def _capabilities_restricted() -> tuple[Rule, Rule]:
    """Upstream `capabilities_restricted`, as its two requirements (both must hold)."""
    caps = f"{_C_SC}.capabilities"
    drops_all = (
        f"({has_path('c', 'securityContext', 'capabilities', 'drop')} && 'ALL' in {caps}.drop)"
    )
    adds_only = (
        f"(!{has_path('c', 'securityContext', 'capabilities', 'add')} || "
        f"{caps}.add.all(cap, cap == 'NET_BIND_SERVICE'))"
    )
    return (
        _container_rule(
            "pss.capabilities_restricted.dropAll",
            'must set securityContext.capabilities.drop=["ALL"]',
            drops_all,
            _RESTRICTED,
            exempt=_WINDOWS,
        ),
        _container_rule(
            "pss.capabilities_restricted.add",
            "must not add capabilities other than NET_BIND_SERVICE",
            adds_only,
            _RESTRICTED,
            exempt=_WINDOWS,
        ),
    )


@functools.cache
def _all_rules(kubernetes: str) -> tuple[Rule, ...]:
    return (
        _host_namespaces(),
        _privileged(),
        _capabilities_baseline(),
        _host_path_volumes(),
        _host_ports(),
        _app_armor(),
        _selinux(),
        _proc_mount_baseline(kubernetes),
        _seccomp_baseline(),
        _sysctls(kubernetes),
        _windows_host_process(),
        _host_probes(),
        _restricted_volumes(),
        _allow_privilege_escalation(),
        _run_as_non_root(kubernetes),
        _run_as_user(kubernetes),
        _seccomp_restricted(),
        *_capabilities_restricted(),
        _proc_mount_restricted(),
    )


def rules_for_level(level: str, kubernetes: str = DEFAULT_K8S_VERSION) -> list[Rule]:
    """The rules of Pod Security Standard `level` (baseline | restricted) on Kubernetes
    `kubernetes` ("1.34".."1.37"), in upstream order."""
    if level not in (LEVEL_BASELINE, LEVEL_RESTRICTED):
        raise ValueError(f"unknown Pod Security level {level!r}; expected baseline or restricted")
    tag = f"level:{level}"
    return [rule for rule in _all_rules(kubernetes) if tag in rule.applies_to]
