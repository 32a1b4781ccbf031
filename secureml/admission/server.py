"""Pods judged by a real API server: a dry-run create of each, in the tenant's namespace."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from secureml.cluster.connection import Cluster, ServerRefusedError, connect
from secureml.core.errors import ClusterError
from secureml.core.violation import Violation
from secureml.pods.verdict import PodVerdict
from secureml.pods.workloads import PodObject

DEFAULT_NAMESPACE = "default"
# Server-set metadata a pod read back from a cluster carries; a create must not.
_SERVER_FIELDS = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "managedFields",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
_VAP = re.compile(
    r"ValidatingAdmissionPolicy '(?P<policy>[^']*)' with binding '[^']*' denied request: "
    r"(?P<message>.*)",
    re.DOTALL,
)
_RULE_ID = re.compile(r"^(?P<id>[A-Za-z][\w-]*(?:\.[\w-]+)+): (?P<message>.*)$", re.DOTALL)
_PSA = re.compile(r'violates PodSecurity "(?P<level>[a-z]+):[^"]*": (?P<detail>.*)$', re.DOTALL)

# PodSecurity check titles (k8s.io/pod-security-admission/policy, ForbiddenReason) -> rule id.
# Titles shared by a baseline and a restricted check resolve by the enforced level.
PSA_TITLES: dict[str, str | dict[str, str]] = {
    "host namespaces": "pss.hostNamespaces",
    "privileged": "pss.privileged",
    "non-default capabilities": "pss.capabilities_baseline",
    "hostPath volumes": "pss.hostPathVolumes",
    "hostPort": "pss.hostPorts",
    "forbidden AppArmor profile": "pss.appArmorProfile",
    "forbidden AppArmor profiles": "pss.appArmorProfile",
    "seLinuxOptions": "pss.seLinuxOptions",
    "procMount": {"baseline": "pss.procMount", "restricted": "pss.procMount_restricted"},
    "seccompProfile": {
        "baseline": "pss.seccompProfile_baseline",
        "restricted": "pss.seccompProfile_restricted",
    },
    "forbidden sysctls": "pss.sysctls",
    "hostProcess": "pss.windowsHostProcess",
    "probe or lifecycle host": "pss.hostProbesAndHostLifecycle",
    "restricted volume types": "pss.restrictedVolumes",
    "allowPrivilegeEscalation != false": "pss.allowPrivilegeEscalation",
    "runAsNonRoot != true": "pss.runAsNonRoot",
    "runAsUser=0": "pss.runAsUser",
    "unrestricted capabilities": "pss.capabilities_restricted",  # split by detail below
}
_PSA_TITLE = re.compile(
    r"(?:^|, )(?P<title>"
    + "|".join(re.escape(t) for t in sorted(PSA_TITLES, key=len, reverse=True))
    + r")(?= \(|, |$)"
)


def check_pods_on_server(
    pods: Iterable[PodObject],
    namespace: str | None = None,
    *,
    kubeconfig: Path | None = None,
    context: str | None = None,
    cluster: Cluster | None = None,
) -> list[PodVerdict]:
    """A server dry-run create of each pod; `namespace` overrides each pod's own namespace
    (default: the pod's, else the kubeconfig context's, else `default`)."""
    cluster = cluster or connect(kubeconfig, context)
    verdicts = []
    for pod in pods:
        target = namespace or pod.namespace or cluster.namespace or DEFAULT_NAMESPACE
        verdicts.append(_dry_run_create(cluster, pod, target))
    return verdicts


def _dry_run_create(cluster: Cluster, pod: PodObject, namespace: str) -> PodVerdict:
    body = creatable(pod.pod, namespace, pod.name)
    path = f"/api/v1/namespaces/{namespace}/pods"
    for attempt in range(2):
        try:
            response = cluster.request("POST", path, query={"dryRun": "All"}, body=body)
        except ServerRefusedError as refusal:
            if refusal.code == 404:  # the namespace (a tenant user may not read namespaces)
                raise ClusterError(
                    f"namespace {namespace} does not exist on {cluster.describe()}",
                    why=f"{pod.file}: {refusal.message}",
                    fix="apply the tenant bundle first (secureml profile apply), or give the "
                    "tenant namespace with --namespace",
                ) from None
            if refusal.code == 403 and "cannot create resource" in refusal.message:  # RBAC
                raise ClusterError(
                    f"{cluster.describe()} does not let this user create pods in {namespace}",
                    why=refusal.message,
                    fix="a dry-run create needs the RBAC right to create pods in the namespace",
                ) from None
            if refusal.code == 409 and attempt == 0:  # a pod of that name exists: any name will do
                body["metadata"].pop("name", None)
                body["metadata"]["generateName"] = f"{pod.name or 'pod'}-"
                continue
            return PodVerdict(pod, tuple(findings_of(refusal)))
        return PodVerdict(pod, (), admitted=response.body)
    raise AssertionError("unreachable: the second attempt returns")


def creatable(pod: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The Pod as a create request: in `namespace`, named, without server-set fields."""
    body = copy.deepcopy(pod)
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    meta["namespace"] = namespace
    if not meta.get("name") and not meta.get("generateName"):
        meta["generateName"] = f"{name or 'pod'}-"
    return body


def findings_of(refusal: ServerRefusedError) -> list[Violation]:
    """The findings of a refused create: rule ids from the message where it carries them."""
    message = refusal.message
    if refusal.code in (400, 422):
        causes = [
            f"{c.get('field')}: {c.get('message')}" if c.get("field") else str(c.get("message"))
            for c in refusal.causes
        ]
        return [Violation("k8s.validation", text) for text in causes] or [
            Violation("k8s.validation", message)
        ]
    return message_findings(message)


def message_findings(message: str) -> list[Violation]:
    """The findings of a refusal's message alone (a Forbidden create, as a controller that tried
    the create reports it: Argo's node message, `pods "x" is forbidden: ...`)."""
    vap = _VAP.search(message)
    if vap:
        text = vap.group("message").strip()
        rule = _RULE_ID.match(text)
        if rule:
            return [Violation(rule.group("id"), rule.group("message").strip())]
        return [Violation("k8s.ValidatingAdmissionPolicy", f"{vap.group('policy')}: {text}")]
    psa = _PSA.search(message)
    if psa:
        return psa_findings(psa.group("level"), psa.group("detail"))
    return [Violation(_who_refused(message), message)]


def psa_findings(level: str, detail: str) -> list[Violation]:
    """Split PodSecurity's `title (detail), title (detail)` list into one finding per check."""
    starts = [m for m in _PSA_TITLE.finditer(detail) if _top_level(detail, m.start("title"))]
    if not starts:
        return [Violation("k8s.PodSecurity", detail)]
    findings = []
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(detail)
        title = match.group("title")
        text = detail[match.start("title") : end].strip()
        target = PSA_TITLES[title]
        rule = target if isinstance(target, str) else target.get(level, f"k8s.PodSecurity.{title}")
        if title == "unrestricted capabilities":
            if 'capabilities.drop=["ALL"]' in text:
                findings.append(Violation(f"{rule}.dropAll", text))
            if "capabilities.add" in text:
                findings.append(Violation(f"{rule}.add", text))
            continue
        findings.append(Violation(rule, text))
    return findings


def _top_level(text: str, position: int) -> bool:
    """Whether `position` of `text` is outside every parenthesis and quoted string."""
    depth, quoted = 0, False
    for char in text[:position]:
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
    return depth == 0 and not quoted


def _who_refused(message: str) -> str:
    lowered = message.lower()
    if "service account" in lowered or "serviceaccount" in lowered:
        return "k8s.ServiceAccount"
    if "quota" in lowered:
        return "k8s.ResourceQuota"
    if "per container" in lowered or "per pod" in lowered or "limitrange" in lowered:
        return "k8s.LimitRanger"
    if "mutatingadmissionpolicy" in lowered or "jsonpatch" in lowered:
        return "k8s.MutatingAdmissionPolicy"
    return "k8s.admission"
