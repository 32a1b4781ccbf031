"""A tenant's checks in `doctor cluster`: bundle in sync, policies bound and clean, PSA labels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secureml.bundle.common import BundleOptions, Manifest
from secureml.bundle.namespace import PSA_MODES
from secureml.bundle.render import file_name
from secureml.cluster.apply import FIELD_MANAGER, type_warning
from secureml.cluster.refusal import object_ref
from secureml.cluster.requirements import Missing, requirement_error
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION
from secureml.doctor.check import Check, Status
from secureml.doctor.cluster_drift import editors, object_drift
from secureml.doctor.cluster_read import Found, Reader
from secureml.profile.model import TenantProfile

PSA_PREFIX = "pod-security.kubernetes.io/"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")


@dataclass(frozen=True)
class TenantBundle:
    """One tenant: its profile file, the profile, the rendered objects and where each is stored."""

    path: Path
    profile: TenantProfile
    options: BundleOptions
    objects: list[tuple[Manifest, Found]]

    @property
    def name(self) -> str:
        return self.profile.metadata.name

    def stored(self, kind: str) -> list[tuple[Manifest, dict[str, Any]]]:
        return [
            (obj, found.stored)
            for obj, found in self.objects
            if obj["kind"] == kind and found.stored is not None
        ]


@dataclass(frozen=True)
class Drift:
    """A stored object that differs from its render: the diff, and who else wrote the object."""

    kind: str
    ref: str
    diff: str
    editors: list[str]


def read_tenant(
    reader: Reader,
    path: Path,
    profile: TenantProfile,
    objects: list[Manifest],
    options: BundleOptions,
) -> TenantBundle:
    return TenantBundle(path, profile, options, [(obj, reader.find(obj)) for obj in objects])


def tenant_checks(reader: Reader, tenant: TenantBundle, server_version: str) -> list[Check]:
    return [
        bundle_check(reader, tenant, server_version),
        pod_security_check(tenant),
        bindings_check(tenant),
        type_checking_check(tenant, server_version),
    ]


def apply_command(tenant: TenantBundle) -> str:
    """The `secureml profile apply` line that writes this bundle (the render flags it was read with)."""
    options = tenant.options
    flags = [f"secureml profile apply {tenant.path}"]
    if options.k8s_version != DEFAULT_K8S_VERSION:
        flags.append(f"--k8s-version {options.k8s_version}")
    if options.image_policy != "policy-controller":
        flags.append(f"--image-policy {options.image_policy}")
    if not options.kubeflow_profile:
        flags.append("--no-kubeflow-profile")
    if options.kfp_namespace != "kubeflow":
        flags.append(f"--kfp-namespace {options.kfp_namespace}")
    flags.extend(f"--api-server-cidr {cidr}" for cidr in options.api_server_cidrs)
    return " ".join(flags)


def bundle_check(reader: Reader, tenant: TenantBundle, server_version: str) -> Check:
    name, title = f"tenant.{tenant.name}.bundle", f"tenant {tenant.name}: bundle applied, in sync"
    unserved: dict[tuple[str, str], list[str]] = {}
    absent: list[str] = []
    drifts: list[Drift] = []
    for obj, found in tenant.objects:
        ref = object_ref(obj)
        if not found.served:
            unserved.setdefault((obj["apiVersion"], obj["kind"]), []).append(
                obj["metadata"]["name"]
            )
        elif found.stored is None:
            absent.append(ref)
        else:
            diff = object_drift(obj, found.stored, f"{tenant.name}/{ref}")
            if diff:
                drifts.append(Drift(obj["kind"], ref, diff, editors(found.stored, FIELD_MANAGER)))
    total = len(tenant.objects)
    if not (unserved or absent or drifts):
        return Check(name, title, "pass", f"all {total} objects stored as rendered")
    seen: list[str] = []
    fixes: list[str] = []
    if unserved:
        missing = [Missing(api, kind, tuple(names)) for (api, kind), names in unserved.items()]
        error = requirement_error(missing, reader.cluster.served, server_version)
        seen.append(f"not served by the cluster: {_one_line(error.why)}")
        fixes.append(_one_line(error.fix))
    if absent:
        stored = total - len(absent) - sum(len(names) for names in unserved.values())
        if stored == 0 and not unserved:
            seen.append("not applied: none of the bundle's objects is on the cluster")
        else:
            seen.append(f"missing ({len(absent)} of {total}): {', '.join(absent)}")
    if drifts:
        seen.append(f"differs from the render ({len(drifts)} of {total}):")
        for drift in drifts:
            written = f" (also written by {', '.join(drift.editors)})" if drift.editors else ""
            seen.append(f"{drift.ref}{written}\n{drift.diff.rstrip()}")
    command = apply_command(tenant)
    edited = sorted({drift.kind for drift in drifts if drift.editors})
    if edited:
        files = " ".join(f"-f DIR/{tenant.name}/{file_name(kind)}" for kind in edited)
        fixes.append(
            f"apply the profile again: {command} --force-conflicts (takes back the fields another "
            "field manager changed; change the profile instead if the edit is meant to stay). A "
            "server-side apply keeps list items another manager added: if the diff stays, put "
            f"the rendered objects back with secureml profile render {tenant.path} -o DIR and "
            f"kubectl replace {files}"
        )
    elif absent or drifts:
        fixes.append(f"apply the profile again: {command}")
    return Check(name, title, "fail", "\n".join(seen), "\n".join(fixes))


def _one_line(text: str) -> str:
    """`requirement_error`'s lines (indented for an error on stderr) joined with semicolons."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def pod_security_check(tenant: TenantBundle) -> Check:
    name = f"tenant.{tenant.name}.pod-security"
    namespace = tenant.profile.spec.namespace
    title = f"tenant {tenant.name}: Pod Security labels of namespace {namespace}"
    rendered = [obj for obj, _ in tenant.objects if obj["kind"] == "Namespace"]
    stored = tenant.stored("Namespace")
    wanted = {k: v for k, v in _labels(rendered[0]).items() if k.startswith(PSA_PREFIX)}
    if not stored:
        return Check(
            name,
            title,
            "fail",
            f"namespace {namespace} does not exist",
            f"apply the profile: {apply_command(tenant)}",
        )
    have = _labels(stored[0][1])
    wrong = {key: value for key, value in wanted.items() if have.get(key) != value}
    if not wrong:
        return Check(name, title, "pass", ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())))
    enforce = f"{PSA_PREFIX}{PSA_MODES[0]}"
    status: Status = "fail" if enforce in wrong else "warn"
    seen = "; ".join(
        f"{key}={have[key]} (the profile wants {value})"
        if key in have
        else f"{key} missing (the profile wants {value})"
        for key, value in sorted(wrong.items())
    )
    labels = " ".join(f"{key}={value}" for key, value in sorted(wrong.items()))
    return Check(
        name,
        title,
        status,
        seen,
        f"kubectl label namespace {namespace} --overwrite {labels} (or {apply_command(tenant)})",
    )


def bindings_check(tenant: TenantBundle) -> Check:
    name = f"tenant.{tenant.name}.bindings"
    title = f"tenant {tenant.name}: every admission policy stored and bound"
    policies = [obj for obj, _ in tenant.objects if obj["kind"] in POLICY_KINDS]
    stored = {(obj["kind"], obj["metadata"]["name"]): found.stored for obj, found in tenant.objects}
    problems: list[str] = []
    for policy in policies:
        kind, policy_name = policy["kind"], policy["metadata"]["name"]
        if stored.get((kind, policy_name)) is None:
            problems.append(f"{kind}/{policy_name} is not on the cluster")
        bindings = [
            obj
            for obj, _ in tenant.objects
            if obj["kind"] == f"{kind}Binding"
            and (obj.get("spec") or {}).get("policyName") == policy_name
        ]
        for binding in bindings:
            live = stored.get((binding["kind"], binding["metadata"]["name"]))
            ref = f"{binding['kind']}/{binding['metadata']['name']}"
            if live is None:
                problems.append(f"{ref} is missing: {kind}/{policy_name} judges no pod")
                continue
            spec = live.get("spec") or {}
            if spec.get("policyName") != policy_name:
                problems.append(f"{ref} binds {spec.get('policyName')!r}, not {policy_name}")
            wanted = (binding.get("spec") or {}).get("validationActions")
            if wanted and "Deny" in wanted and "Deny" not in (spec.get("validationActions") or []):
                problems.append(
                    f"{ref} validationActions {spec.get('validationActions')}: a violation is "
                    "not denied"
                )
    if not problems:
        return Check(name, title, "pass", f"{len(policies)} policies, each with its binding")
    return Check(
        name,
        title,
        "fail",
        "; ".join(problems),
        f"apply the profile again: {apply_command(tenant)}",
    )


def type_checking_check(tenant: TenantBundle, server_version: str) -> Check:
    """The server's type checking of each stored policy (`status.typeChecking`).

    kube-controller-manager's validatingadmissionpolicy-status-controller writes it for each
    ValidatingAdmissionPolicy generation; a MutatingAdmissionPolicy has it only where a server
    writes one.
    """
    name = f"tenant.{tenant.name}.type-checking"
    title = f"tenant {tenant.name}: admission policies type-check without warnings"
    warnings: list[str] = []
    pending: list[str] = []
    checked = 0
    for kind in POLICY_KINDS:
        for _, live in tenant.stored(kind):
            status = live.get("status") or {}
            type_checking = status.get("typeChecking")
            current = status.get("observedGeneration", 0) >= live["metadata"].get("generation", 1)
            if type_checking is None or not current:
                if kind == "ValidatingAdmissionPolicy":
                    pending.append(f"{kind}/{live['metadata']['name']}")
                continue
            checked += 1
            for warning in type_checking.get("expressionWarnings") or []:
                text = type_warning(live, warning)
                warnings.append(text.replace("ValidatingAdmissionPolicy/", f"{kind}/", 1))
    if warnings:
        return Check(
            name,
            title,
            "warn",
            "\n".join(warnings),
            "an expression reads a field the server's schema lacks: the rule cannot hold as "
            f"written there; render for the server's version (--k8s-version, server "
            f"{server_version}) and apply again, or report it as a secureml bug",
        )
    if pending:
        return Check(
            name,
            title,
            "warn",
            f"not type-checked yet: {', '.join(pending)}",
            "wait a few seconds after an apply; if it stays, check that kube-controller-manager "
            "runs with its validatingadmissionpolicy-status controller",
        )
    if checked == 0:
        return Check(
            name,
            title,
            "warn",
            "no policy of the bundle is on the cluster, so none was type-checked",
            f"apply the profile: {apply_command(tenant)}",
        )
    return Check(name, title, "pass", f"{checked} policies type-checked, no warning")
