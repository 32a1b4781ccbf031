"""Apply a rendered tenant bundle to a cluster: server-side apply, prerequisites first."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secureml.cluster.connection import APPLY_PATCH, Cluster, ServerRefusedError, connect
from secureml.cluster.refusal import object_ref, refusal_error
from secureml.cluster.requirements import missing_kinds, requirement_error
from secureml.core.errors import SecuremlError

FIELD_MANAGER = "secureml"
TYPECHECK_TIMEOUT_S = 10.0
_POLL_S = 0.25
_VALIDATION_INDEX = re.compile(r"^spec\.validations\[(\d+)\]")
_WARNING_TEXT = re.compile(r'^\d{3} \S+ "(.*)"$', re.DOTALL)


@dataclass(frozen=True)
class AppliedObject:
    """One object of the bundle and what the server did with it."""

    ref: str
    outcome: str  # created | configured | skipped


@dataclass
class ApplyResult:
    """What `apply_bundle` did: per object, type-checking warnings, and notes."""

    server: str
    dry_run: bool
    objects: list[AppliedObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class BundleRefusedError(SecuremlError):
    """The server refused objects of the bundle; `applied` lists what was written before (exit 1)."""

    exit_code = 1

    def __init__(self, refusals: list[SecuremlError], applied: list[AppliedObject], dry_run: bool):
        self.refusals = refusals
        self.applied = applied
        done = [obj.ref for obj in applied if obj.outcome != "skipped"]
        if dry_run:
            tail = "dry run: nothing was stored"
        elif done:
            tail = f"applied before the refusal: {', '.join(done)}"
        else:
            tail = "nothing was applied"
        super().__init__("\n".join(refusal.diagnostics() for refusal in refusals) + f"\n  ({tail})")

    def diagnostics(self) -> str:
        return self.what


def apply_bundle(
    manifests: Iterable[Mapping[str, Any]],
    kubeconfig: Path | None = None,
    context: str | None = None,
    dry_run: bool = False,
    *,
    force_conflicts: bool = False,
    cluster: Cluster | None = None,
    typecheck_timeout_s: float = TYPECHECK_TIMEOUT_S,
) -> ApplyResult:
    """Server-side apply every object of `manifests` (order: docs/architecture.md)."""
    objects = [dict(obj) for obj in manifests]
    cluster = cluster or connect(kubeconfig, context)
    missing = missing_kinds(objects, cluster.served)
    if missing:
        raise requirement_error(missing, cluster.served, cluster.version())
    result = ApplyResult(server=cluster.server, dry_run=dry_run)
    absent = _absent_namespaces(cluster, objects) if dry_run else set()
    refusals: list[SecuremlError] = []
    for obj in apply_order(objects):
        ref = object_ref(obj)
        namespace = obj.get("metadata", {}).get("namespace")
        if namespace in absent:
            result.objects.append(AppliedObject(ref, "skipped"))
            continue
        try:
            response = _apply_one(cluster, obj, dry_run=dry_run, force=force_conflicts)
        except ServerRefusedError as refusal:
            refusals.append(refusal_error(obj, refusal, action="apply"))
            if not dry_run:
                break
            continue
        result.objects.append(AppliedObject(ref, "created" if response[0] == 201 else "configured"))
        result.notes.extend(f"{ref}: {_warning_text(text)}" for text in response[1])
    if refusals:
        raise BundleRefusedError(refusals, result.objects, dry_run)
    if absent:
        result.notes.append(
            f"namespace(s) {', '.join(sorted(absent))} do not exist yet: a dry run cannot check "
            "the objects in them (skipped); apply without --dry-run, or create the namespace first"
        )
    policies = [obj for obj in objects if obj["kind"] == "ValidatingAdmissionPolicy"]
    if dry_run:
        if policies:
            result.notes.append(
                "dry run: the ValidatingAdmissionPolicies' type checking is not reported "
                "(the server type-checks stored policies only)"
            )
    else:
        _read_type_checking(cluster, policies, result, typecheck_timeout_s)
    return result


def apply_order(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces, then built-in kinds, then custom resources; bundle order within each."""

    def rank(obj: Mapping[str, Any]) -> int:
        if obj["kind"] == "Namespace" and obj["apiVersion"] == "v1":
            return 0
        return 1 if is_built_in(obj["apiVersion"]) else 2

    return sorted(objects, key=rank)


def is_built_in(api_version: str) -> bool:
    """Kubernetes' own API groups: the core group, and groups ending in `.k8s.io` (or no dot)."""
    if "/" not in api_version:
        return True
    group = api_version.split("/")[0]
    return group.endswith(".k8s.io") or "." not in group


def _apply_one(
    cluster: Cluster, obj: dict[str, Any], *, dry_run: bool, force: bool
) -> tuple[int, list[str]]:
    resources = cluster.served(obj["apiVersion"]) or {}
    resource = resources[obj["kind"]]  # missing_kinds checked every kind beforehand
    meta = obj.get("metadata", {})
    path = cluster.object_path(obj["apiVersion"], resource, meta.get("namespace"))
    query = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
    if dry_run:
        query["dryRun"] = "All"
    response = cluster.request(
        "PATCH", f"{path}/{meta['name']}", query=query, body=obj, content_type=APPLY_PATCH
    )
    return response.code, response.warnings


def _absent_namespaces(cluster: Cluster, objects: list[dict[str, Any]]) -> set[str]:
    wanted = {obj.get("metadata", {}).get("namespace") for obj in objects} - {None}
    return {ns for ns in wanted if not cluster.exists(f"/api/v1/namespaces/{ns}")}


def _read_type_checking(
    cluster: Cluster, policies: list[dict[str, Any]], result: ApplyResult, timeout_s: float
) -> None:
    """Poll each policy until the server reports type checking of its current generation."""
    deadline = time.monotonic() + timeout_s
    pending = list(policies)
    while pending:
        still = []
        for policy in pending:
            name = policy["metadata"]["name"]
            try:
                stored = cluster.get(
                    f"/apis/{policy['apiVersion']}/validatingadmissionpolicies/{name}"
                )
            except ServerRefusedError as refusal:
                raise cluster.unusable(f"GET ValidatingAdmissionPolicy/{name}", refusal) from None
            status = stored.get("status") or {}
            current = status.get("observedGeneration", 0) >= stored["metadata"].get("generation", 1)
            if not current or status.get("typeChecking") is None:
                still.append(policy)
                continue
            for warning in status["typeChecking"].get("expressionWarnings") or []:
                result.warnings.append(type_warning(policy, warning))
        pending = still
        if pending and time.monotonic() >= deadline:
            names = ", ".join(p["metadata"]["name"] for p in pending)
            result.notes.append(
                f"ValidatingAdmissionPolicy {names}: the server reported no type checking within "
                f"{timeout_s:g} s (kube-controller-manager's "
                "validatingadmissionpolicy-status-controller fills status.typeChecking)"
            )
            return
        if pending:
            time.sleep(_POLL_S)


def type_warning(policy: Mapping[str, Any], warning: Mapping[str, Any]) -> str:
    """`ValidatingAdmissionPolicy/name: field (rule id): warning`."""
    where = str(warning.get("fieldRef") or "")
    rule = ""
    match = _VALIDATION_INDEX.match(where)
    validations = policy.get("spec", {}).get("validations") or []
    if match and int(match.group(1)) < len(validations):
        message = str(validations[int(match.group(1))].get("message") or "")
        rule = f" ({message.split(': ', 1)[0]})" if ": " in message else ""
    text = str(warning.get("warning") or "").strip()
    return f"ValidatingAdmissionPolicy/{policy['metadata']['name']}: {where}{rule}: {text}"


def _warning_text(header: str) -> str:
    match = _WARNING_TEXT.match(header.strip())
    return match.group(1) if match else header.strip()
