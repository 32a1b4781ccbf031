"""What the cluster adds to a secure step at admission, defined once.

KFP cannot express a read-only root filesystem, CSI or downward-API volumes, pod annotations set by
the platform, or DRA claims (docs/architecture.md, "What KFP can express"). The tenant bundle's
MutatingAdmissionPolicy adds them, keyed on the labels the compiler sets. The mutations live here
as data (`mutations_for_profile`) and are used twice:

- `render_policy` turns them into the policy's JSONPatch CEL expression;
- `apply_mutations` applies the same data in Python, so the compiler's preview and
  `secureml check-pod` see the pod the cluster would admit.

Semantics of both: every operation is computed from the pod as submitted and touches its own
path. `append` adds items to a list (creating it and any missing parent); `set` writes a value
(creating missing parents, replacing what is there). Appends never deduplicate: a pod that
already has a volume or mount of the same name or path becomes invalid and the API server rejects
it, which is the intended fail-closed answer to a pod that tries to pre-empt a platform volume.
Operations run once per admission (`reinvocationPolicy: Never`).
"""

from __future__ import annotations

import copy
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from secureml import contract
from secureml.bundle.common import (
    BundleOptions,
    Manifest,
    cluster_name,
    namespace_selector,
    tenant_labels,
)
from secureml.k8s_versions import at_least
from secureml.profile import TenantProfile

SPIFFE_CSI_DRIVER = "csi.spiffe.io"
SPIFFE_VOLUME = "secureml-spiffe"
PODINFO_VOLUME = "secureml-podinfo"
PRELOAD_ITEM = "ld.so.preload"
CLAIM_NAME = "secureml-gpu"
# Every pod has these; operations below them never need to create them.
ALWAYS_PRESENT = ("metadata", "spec")

Target = Literal["pod", "containers", "main"]


@dataclass(frozen=True)
class FromLabel:
    """A value read from one of the pod's labels at admission."""

    key: str


@dataclass(frozen=True)
class LabelIs:
    """The pod's label `key` is one of `values` (any value when `values` is empty)."""

    key: str
    values: tuple[str, ...] = ()

    def holds(self, labels: dict[str, str]) -> bool:
        if self.key not in labels:
            return False
        return not self.values or labels[self.key] in self.values

    def cel(self) -> str:
        present = f"has(object.metadata.labels) && {_str(self.key)} in object.metadata.labels"
        if not self.values:
            return present
        options = ", ".join(_str(value) for value in self.values)
        return f"{present} && object.metadata.labels[{_str(self.key)}] in [{options}]"


@dataclass(frozen=True)
class Operation:
    """One change: `set` a value or `append` items at `path` under `target`.

    `target`: `pod` (the path starts at the pod's root), `containers` (every container and init
    container), `main` (the KFP executor container, contract.KFP_MAIN_CONTAINER). The last path
    element may be a map key (e.g. an annotation name); every other one is a field name.
    """

    target: Target
    path: tuple[str, ...]
    kind: Literal["set", "append"]
    value: Any
    when: LabelIs | None = None


@dataclass(frozen=True)
class PodMutation:
    name: str
    purpose: str
    operations: tuple[Operation, ...]


def mutations_for_profile(profile: TenantProfile) -> list[PodMutation]:
    """The mutations the tenant's admission policy applies to its secure steps, in order."""
    spec = profile.spec
    mutations: list[PodMutation] = []
    if spec.hardening.read_only_root_filesystem:
        mutations.append(
            PodMutation(
                "read-only-root",
                "root filesystem read-only, so /etc/ld.so.preload and the image stay as shipped",
                (
                    Operation(
                        "containers", ("securityContext", "readOnlyRootFilesystem"), "set", True
                    ),
                ),
            )
        )
    if spec.identity.required:
        socket_dir = posixpath.dirname(spec.identity.socket_path)
        mutations.append(
            PodMutation(
                "spiffe-socket",
                "the SPIFFE Workload API socket from the SPIFFE CSI driver",
                (
                    Operation(
                        "pod",
                        ("spec", "volumes"),
                        "append",
                        [
                            {
                                "name": SPIFFE_VOLUME,
                                "csi": {"driver": SPIFFE_CSI_DRIVER, "readOnly": True},
                            }
                        ],
                    ),
                    Operation(
                        "containers",
                        ("volumeMounts",),
                        "append",
                        [{"name": SPIFFE_VOLUME, "mountPath": socket_dir, "readOnly": True}],
                    ),
                ),
            )
        )
    shim_step = LabelIs(contract.LABEL_ISOLATION, ("timeslice-shim",))
    if spec.gpu.time_slice is not None and spec.runtime.shim == "enforce":
        limits_file = posixpath.relpath(contract.SHIM_LIMITS_PATH, contract.PODINFO_DIR)
        mutations.append(
            PodMutation(
                "shim-limits-and-preload",
                "the shim's limits (the pod's own annotation) and the preload file, read-only",
                (
                    Operation(
                        "pod",
                        ("metadata", "annotations", contract.ANNOTATION_SHIM_PRELOAD),
                        "set",
                        contract.SHIM_LIBRARY_PATH,
                        shim_step,
                    ),
                    Operation(
                        "pod",
                        ("spec", "volumes"),
                        "append",
                        [
                            {
                                "name": PODINFO_VOLUME,
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": limits_file,
                                            "fieldRef": {
                                                "fieldPath": "metadata.annotations"
                                                f"['{contract.ANNOTATION_LIMITS}']"
                                            },
                                        },
                                        {
                                            "path": PRELOAD_ITEM,
                                            "fieldRef": {
                                                "fieldPath": "metadata.annotations"
                                                f"['{contract.ANNOTATION_SHIM_PRELOAD}']"
                                            },
                                        },
                                        # the launcher's pod-level settings
                                        # (enforcement/podinfo.py)
                                        {
                                            "path": posixpath.basename(contract.PODINFO_LABELS),
                                            "fieldRef": {"fieldPath": "metadata.labels"},
                                        },
                                        {
                                            "path": posixpath.basename(
                                                contract.PODINFO_ANNOTATIONS
                                            ),
                                            "fieldRef": {"fieldPath": "metadata.annotations"},
                                        },
                                    ]
                                },
                            }
                        ],
                        shim_step,
                    ),
                    Operation(
                        "containers",
                        ("volumeMounts",),
                        "append",
                        [
                            {
                                "name": PODINFO_VOLUME,
                                "mountPath": contract.PODINFO_DIR,
                                "readOnly": True,
                            },
                            {
                                "name": PODINFO_VOLUME,
                                "mountPath": contract.SHIM_PRELOAD_FILE,
                                "subPath": PRELOAD_ITEM,
                                "readOnly": True,
                            },
                        ],
                        shim_step,
                    ),
                ),
            )
        )
    if spec.gpu.backend == "dra":
        claimed = LabelIs(contract.LABEL_GPU_CLAIM)
        mutations.append(
            PodMutation(
                "dra-claim",
                "the ResourceClaimTemplate named by the step's gpu-claim label, for the main container",
                (
                    Operation(
                        "pod",
                        ("spec", "resourceClaims"),
                        "append",
                        [
                            {
                                "name": CLAIM_NAME,
                                "resourceClaimTemplateName": FromLabel(contract.LABEL_GPU_CLAIM),
                            }
                        ],
                        claimed,
                    ),
                    Operation(
                        "main", ("resources", "claims"), "append", [{"name": CLAIM_NAME}], claimed
                    ),
                ),
            )
        )
    return mutations


# --- grouping: one JSON-patch operation per (target, path) --------------------------------------


@dataclass(frozen=True)
class _Group:
    target: Target
    path: tuple[str, ...]
    kind: Literal["set", "append"]
    parts: tuple[tuple[LabelIs | None, Any], ...]  # (condition, value or items) in order


def _groups(mutations: Iterable[PodMutation]) -> list[_Group]:
    order: list[tuple[Target, tuple[str, ...]]] = []
    found: dict[tuple[Target, tuple[str, ...]], list[Operation]] = {}
    for mutation in mutations:
        for op in mutation.operations:
            key = (op.target, op.path)
            if key not in found:
                order.append(key)
                found[key] = []
            found[key].append(op)
    groups = []
    for key in order:
        ops = found[key]
        kinds = {op.kind for op in ops}
        if len(kinds) != 1 or (kinds == {"set"} and len(ops) != 1):
            raise ValueError(f"conflicting mutations of {key}")
        groups.append(_Group(key[0], key[1], ops[0].kind, tuple((op.when, op.value) for op in ops)))
    _check_disjoint(groups)
    return groups


def _check_disjoint(groups: list[_Group]) -> None:
    """Operations computed from the submitted pod must not create the same missing parent."""
    for i, first in enumerate(groups):
        for second in groups[i + 1 :]:
            if _shared_target(first.target, second.target):
                common = 0
                for a, b in zip(first.path, second.path, strict=False):
                    if a != b:
                        break
                    common += 1
                # The pod's `spec` and `metadata` always exist; below them paths must split at once.
                floor = 1 if first.target == "pod" else 0
                if common > floor:
                    raise ValueError(f"mutations of {first.path} and {second.path} overlap")


def _shared_target(a: Target, b: Target) -> bool:
    return a == b or {a, b} == {"containers", "main"}


# --- Python application ----------------------------------------------------------------------


def _labels(pod: Manifest) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def is_tenant_step(pod: Manifest, profile: TenantProfile) -> bool:
    """The policy matches pods in the tenant's namespace (a pod without one is taken to be there)
    whose tenant label names this tenant."""
    namespace = (pod.get("metadata") or {}).get("namespace")
    if namespace not in (None, profile.spec.namespace):
        return False
    return _labels(pod).get(contract.LABEL_TENANT) == profile.metadata.name


def _resolve(value: Any, labels: dict[str, str]) -> Any:
    if isinstance(value, FromLabel):
        return labels[value.key]
    if isinstance(value, dict):
        return {key: _resolve(item, labels) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, labels) for item in value]
    return value


def _group_value(group: _Group, labels: dict[str, str]) -> tuple[bool, Any]:
    """Whether the group applies to a pod with `labels`, and the value or items it writes."""
    live = [(when, value) for when, value in group.parts if when is None or when.holds(labels)]
    if not live:
        return False, None
    if group.kind == "set":
        return True, _resolve(live[0][1], labels)
    items: list[Any] = []
    for _, value in live:
        items.extend(_resolve(value, labels))
    return True, items


def _write(node: dict[str, Any], path: tuple[str, ...], kind: str, value: Any) -> None:
    *parents, leaf = path
    for name in parents:  # (a pod always has metadata and spec; setdefault keeps them)
        node = node.setdefault(name, {})
    if kind == "set":
        node[leaf] = copy.deepcopy(value)
    else:
        node[leaf] = list(node.get(leaf) or []) + copy.deepcopy(value)


def apply_mutations(pod: Manifest, profile: TenantProfile) -> Manifest:
    """The pod as the tenant's MutatingAdmissionPolicy would admit it (a new dict).

    Pods that are not this tenant's secure steps (tenant label) come back unchanged.
    """
    result = copy.deepcopy(pod)
    if not is_tenant_step(pod, profile):
        return result
    labels = _labels(pod)
    spec = result.setdefault("spec", {})
    for group in _groups(mutations_for_profile(profile)):
        applies, value = _group_value(group, labels)
        if not applies:
            continue
        if group.target == "pod":
            _write(result, group.path, group.kind, value)
            continue
        for field_name in ("containers", "initContainers"):
            for container in spec.get(field_name) or []:
                if group.target == "main" and (
                    field_name != "containers"
                    or container.get("name") != contract.KFP_MAIN_CONTAINER
                ):
                    continue
                _write(container, group.path, group.kind, value)
    return result


# --- CEL rendering -----------------------------------------------------------------------------


def _str(text: str) -> str:
    """A CEL string literal (JSON's escapes are valid CEL escapes)."""
    return json.dumps(text)


def _pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


# Pod fields whose values are string maps (the key is data, not a field name), by their last two
# schema path elements. Every other object is built with its schema type (`_cel_object`).
_STRING_MAPS = frozenset(
    {("metadata", "annotations"), ("metadata", "labels"), ("spec", "nodeSelector")}
)
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A schema path: the field names from the pod's root down to a value, list items transparent
# (("spec", "volumes", "csi") is the `csi` of any volume). Kubernetes names the CEL type of the
# object there `Object.spec.volumes.csi`.
SchemaPath = tuple[str, ...]


def _is_string_map(at: SchemaPath) -> bool:
    return at[-2:] in _STRING_MAPS


def _cel_object(at: SchemaPath, fields: list[tuple[str, str]]) -> str:
    """A value of the object type at `at`, or a string map there.

    The API server's CEL environment requires homogeneous aggregate literals: a map literal of
    mixed value types (`{"name": "x", "readOnly": true}`) is refused when the policy is created.
    Typed object construction (`Object.spec.volumes{name: "x", csi: ...}`) is what it accepts.
    """
    if _is_string_map(at):
        return "{" + ", ".join(f"{_str(key)}: {value}" for key, value in fields) + "}"
    for key, _ in fields:
        if not _FIELD_NAME.fullmatch(key):
            raise ValueError(f"{key!r} under {'.'.join(at)} is no field name (a string map?)")
    body = ", ".join(f"{key}: {value}" for key, value in fields)
    return f"Object.{'.'.join(at)}{{{body}}}"


def _cel_value(value: Any, at: SchemaPath) -> str:
    """`value`, to be written at schema path `at`, as a CEL expression the API server accepts."""
    if isinstance(value, FromLabel):
        return f"object.metadata.labels[{_str(value.key)}]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_cel_value(item, at) for item in value) + "]"
    if isinstance(value, dict):
        return _cel_object(at, [(key, _cel_value(item, (*at, key))) for key, item in value.items()])
    raise TypeError(f"no CEL literal for {value!r}")


def _nest(parent: SchemaPath, path: tuple[str, ...], value_cel: str) -> str:
    """The object to add at path[0] (under `parent`) when it is missing: path[1:] nested down to
    the value."""
    if len(path) == 1:
        return value_cel
    here = (*parent, path[0])
    return _cel_object(here, [(path[1], _nest(here, path[1:], value_cel))])


def _pointer_cel(parts: tuple[str, ...]) -> str:
    """A JSON pointer as CEL: literal segments merged, `string(...)` index expressions kept."""
    pieces: list[str] = []
    literal = ""
    for part in parts:
        if part.startswith("string("):
            if literal:
                pieces.append(_str(literal))
                literal = ""
            pieces.append(part)
        else:
            literal += part
    if literal:
        pieces.append(_str(literal))
    return " + ".join(pieces)


def _patch(pointer: tuple[str, ...], value_cel: str) -> str:
    return f'JSONPatch{{op: "add", path: {_pointer_cel(pointer)}, value: {value_cel}}}'


def _ensure(
    var: str, at: SchemaPath, pointer: tuple[str, ...], path: tuple[str, ...], value_cel: str
) -> str:
    """One JSONPatch that sets `value_cel` at `path` under `var` (schema path `at`), creating
    missing parents."""
    head = path[0]
    here = (*pointer, "/" + _pointer(head))
    if len(path) == 1:
        return _patch(here, value_cel)
    deeper = _ensure(f"{var}.{head}", (*at, head), here, path[1:], value_cel)
    if var == "object" and head in ALWAYS_PRESENT:
        return deeper
    created = _patch(here, _nest(at, path, value_cel))
    return f"(has({var}.{head}) ? {deeper} : {created})"


def _appends(
    var: str, at: SchemaPath, pointer: tuple[str, ...], group: _Group
) -> list[tuple[str | None, str]]:
    """(condition or None, JSONPatch) pairs that append `group`'s items at its path under `var`.

    Every item is its own `add .../-`, after patches that create the missing parents (typed empty
    objects) and the missing list (`[]`). A list literal of typed objects as a patch value
    (`value: [Object.spec.resourceClaims{...}]`, also `[] + [...]`) panics kube-apiserver 1.36.3
    (cel-go's list ConvertToNative: "*structpb.Struct is not assignable to *structpb.Value"), and
    the request gets no answer; single typed objects and `[]` are converted fine.
    """
    steps: list[tuple[str | None, str]] = []
    here = pointer
    present: list[str] = []
    field_path = var
    for depth, name in enumerate(group.path):
        here = (*here, "/" + _pointer(name))
        field_path = f"{field_path}.{name}"
        present.append(f"has({field_path})")
        if var == "object" and depth == 0 and name in ALWAYS_PRESENT:
            continue
        last = depth == len(group.path) - 1
        empty = "[]" if last else _cel_object((*at, *group.path[: depth + 1]), [])
        steps.append((f"!({' && '.join(present)})", _patch(here, empty)))
    single = len(group.parts) == 1  # its condition already guards the whole group
    for when, items in group.parts:
        condition = None if when is None or single else when.cel()
        for item in items:
            value = _cel_value(item, (*at, *group.path))
            steps.append((condition, _patch((*here, "/-"), value)))
    return steps


def _condition(parts: tuple[tuple[LabelIs | None, Any], ...]) -> str | None:
    """CEL for "any part applies"; None when one always does."""
    if any(when is None for when, _ in parts):
        return None
    return " || ".join(f"({when.cel()})" for when, _ in parts if when is not None)


def _group_cel(group: _Group) -> str:
    """CEL for a list of JSONPatch operations implementing `group`."""
    if group.target == "pod":
        if group.kind == "set":
            value = _cel_value(group.parts[0][1], group.path)
            body = "[" + _ensure("object", (), (), group.path, value) + "]"
        else:
            body = " + ".join(
                f"[{patch}]" if when is None else f"({when} ? [{patch}] : [])"
                for when, patch in _appends("object", (), (), group)
            )
    else:
        lists = []
        fields = ("containers",) if group.target == "main" else ("containers", "initContainers")
        for field_name in fields:
            source = f"object.spec.{field_name}"
            container: SchemaPath = ("spec", field_name)
            pointer = (f"/spec/{field_name}/", f"string({source}.indexOf(c))")
            chosen = source
            if group.target == "main":
                chosen = f"{source}.filter(c, c.name == {_str(contract.KFP_MAIN_CONTAINER)})"
            if group.kind == "set":
                value = _cel_value(group.parts[0][1], (*container, *group.path))
                steps: list[tuple[str | None, str]] = [
                    (None, _ensure("c", container, pointer, group.path, value))
                ]
            else:
                steps = _appends("c", container, pointer, group)
            mapped = " + ".join(
                f"{chosen}.map(c, {patch})"
                if when is None
                else f"{chosen}.filter(c, {when}).map(c, {patch})"
                for when, patch in steps
            )
            if field_name == "initContainers":
                mapped = f"(has({source}) ? {mapped} : [])"
            lists.append(mapped)
        body = " + ".join(lists)
    condition = _condition(group.parts)
    return body if condition is None else f"(({condition}) ? {body} : [])"


def jsonpatch_expression(profile: TenantProfile) -> str:
    """The JSONPatch CEL expression of the tenant's MutatingAdmissionPolicy ("" when none)."""
    groups = _groups(mutations_for_profile(profile))
    return "\n+ ".join(_group_cel(group) for group in groups)


def tenant_match_condition(profile: TenantProfile) -> str:
    return LabelIs(contract.LABEL_TENANT, (profile.metadata.name,)).cel()


def policy_api_version(options: BundleOptions) -> str:
    """MutatingAdmissionPolicy is GA (v1) from 1.36 and beta (v1beta1) in 1.34 and 1.35."""
    version = "v1" if at_least(options.k8s_version, "1.36") else "v1beta1"
    return f"admissionregistration.k8s.io/{version}"


def render_policy(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    expression = jsonpatch_expression(profile)
    if not expression:
        return []
    return [
        {
            "apiVersion": policy_api_version(options),
            "kind": "MutatingAdmissionPolicy",
            "metadata": {
                "name": cluster_name(profile, "mutate-steps"),
                "labels": tenant_labels(profile),
            },
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "namespaceSelector": namespace_selector(profile),
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                },
                "matchConditions": [
                    {"name": "secure-step-of-tenant", "expression": tenant_match_condition(profile)}
                ],
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
            },
        }
    ]


def render_binding(profile: TenantProfile, options: BundleOptions) -> list[Manifest]:
    if not jsonpatch_expression(profile):
        return []
    name = cluster_name(profile, "mutate-steps")
    return [
        {
            "apiVersion": policy_api_version(options),
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": tenant_labels(profile)},
            "spec": {
                "policyName": name,
                "matchResources": {
                    "namespaceSelector": namespace_selector(profile),
                    "objectSelector": {
                        "matchLabels": {contract.LABEL_TENANT: profile.metadata.name}
                    },
                },
            },
        }
    ]
