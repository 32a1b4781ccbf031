"""What a tenant's bundle enforces, for people: `secureml profile explain`."""

from __future__ import annotations

from typing import Any

from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion
from secureml.core.quantity import format_bytes
from secureml.profile import runtime_image
from secureml.profile.model import TenantProfile

EXPLAIN_SCHEMA = "secureml.dev/profile-explain/v1"

# The rules that hold a step to one pool's terms (those the profile's catalogue has).
_POOL_RULES = {
    "cpu": ("secureml.gpuFreeOffGpuNodes", "secureml.resourceName"),
    "mig": ("secureml.migProfile", "secureml.isolationMatchesGpu", "secureml.gpuCount"),
    "timeslice": (
        "secureml.timeSliceCount",
        "secureml.shimLimits",
        "secureml.gpuRequest",
        "secureml.isolationMatchesGpu",
    ),
    "whole": (
        "secureml.wholeGpuCount",
        "secureml.dedicatedPool",
        "secureml.gpuCount",
        "secureml.isolationMatchesGpu",
    ),
    "dra": ("secureml.resourceClaims",),
}
_SCOPES = {"": "every pod in the namespace", "step": "secureml step pods"}


def _quota(profile: TenantProfile, resource: str) -> str:
    held = profile.spec.gpu.quota.get(resource)
    return f"namespace quota {held}" if held is not None else "no namespace quota"


def _pools(profile: TenantProfile, present: set[str]) -> list[dict[str, Any]]:
    gpu = profile.spec.gpu
    pools: list[dict[str, Any]] = []

    def pool(name: str, key: str, allowed: list[str] | None, refused_why: str = "") -> None:
        rules = [rule for rule in _POOL_RULES[key] if rule in present]
        entry: dict[str, Any] = {"pool": name, "allowed": allowed is not None, "rules": rules}
        if allowed is None:
            entry["refused"] = refused_why
        else:
            entry["terms"] = allowed
        pools.append(entry)

    pool("CPU only (no GPU)", "cpu", ["keeps off every GPU pool (node affinity excludes them)"])
    plugin = gpu.backend == "device-plugin"
    if gpu.mig is not None:
        terms = [f"MIG profiles {', '.join(gpu.mig.allowed_profiles)} on {', '.join(gpu.models)}"]
        if plugin:
            terms += [
                f"nvidia.com/mig-{name}: {_quota(profile, f'nvidia.com/mig-{name}')}"
                for name in gpu.mig.allowed_profiles
            ]
        pool("MIG slice (isolation mig)", "mig", terms)
    else:
        pool("MIG slice (isolation mig)", "mig", None, "spec.gpu.mig is not set")
    timeslice = profile.timeslice_isolation()  # one the tier allows (profile validation)
    if gpu.time_slice is not None:
        ts = gpu.time_slice
        terms = [
            f"one share of {ts.resource_name}" if plugin else "one share from a DRA claim template",
            f"at most {format_bytes(ts.max_memory)} of GPU memory and {ts.max_compute}% of its "
            f"compute (the quota shim: runtime.shim {profile.spec.runtime.shim})",
        ]
        if plugin:
            terms.append(f"{ts.resource_name}: {_quota(profile, ts.resource_name)}")
        pool(f"time-sliced share (isolation {timeslice})", "timeslice", terms)
    else:
        pool(
            f"time-sliced share (isolation {timeslice})",
            "timeslice",
            None,
            "spec.gpu.timeSlice is not set",
        )
    if gpu.whole_gpu is not None:
        whole = gpu.whole_gpu
        terms = [f"1 to {whole.max_per_step} whole GPU(s) a step"]
        if whole.node_selector:
            terms.append(
                "on nodes " + ", ".join(f"{k}={v}" for k, v in sorted(whole.node_selector.items()))
            )
        if plugin:
            terms.append(f"nvidia.com/gpu: {_quota(profile, 'nvidia.com/gpu')}")
        pool("whole GPUs (isolation dedicated)", "whole", terms)
    else:
        pool("whole GPUs (isolation dedicated)", "whole", None, "spec.gpu.wholeGpu is not set")
    if not plugin:
        pool("DRA claims", "dra", ["GPUs only from the bundle's ResourceClaimTemplates"])
    return pools


def _required(profile: TenantProfile) -> list[str]:
    spec = profile.spec
    images = spec.images
    out = [f"images from {', '.join(images.allowed_registries) or '(no registry)'} only"]
    if images.require_digest:
        out.append("every image pinned by digest (@sha256)")
    if images.signatures.required:
        signers = "; ".join(
            f"{i.issuer} {i.subject or i.subject_reg_exp}" for i in images.signatures.identities
        )
        out.append(f"every image signed (Sigstore, keyless) by: {signers}")
    else:
        out.append("image signatures NOT required (spec.images.signatures.required: false)")
    if spec.identity.required:
        out.append(f"a SPIFFE ID per step in trust domain {spec.identity.trust_domain}")
    hardening = spec.hardening
    out.append(f"runs as user {hardening.run_as_user}, group {hardening.run_as_group}, non-root")
    if hardening.read_only_root_filesystem:
        out.append("read-only root filesystem")
    if spec.scrub.before or spec.scrub.after:
        when = " and ".join(
            w for w, on in (("before", spec.scrub.before), ("after", spec.scrub.after)) if on
        )
        out.append(f"GPU memory scrubbed {when} each step (verify {spec.scrub.verify})")
    if runtime_image.injected(profile):
        out.append(
            f"launcher and shim injected from the platform runtime image {spec.runtime.image}"
        )
    else:
        out.append("launcher and shim from the step's own image (spec.runtime.image not set)")
    if not spec.runtime.allow_runtime_installs:
        out.append("no package installs at run time")
    egress = spec.network.egress
    out.append(
        "egress only to "
        + ", ".join(f"{e.cidr}:{','.join(map(str, e.ports)) or 'any'}" for e in egress)
        if egress
        else "no egress"
    )
    return out


def explain(
    profile: TenantProfile, k8s_version: K8sVersion = DEFAULT_K8S_VERSION
) -> dict[str, Any]:
    """The explanation as data (`--format json`); `as_text` and `as_markdown` lay it out."""
    from secureml.rules import rules_for_profile

    rules = rules_for_profile(profile, k8s_version)
    present = {rule.id for rule in rules}
    levels = [
        level
        for level in ("timeslice", "timeslice-shim", "mig", "dedicated")
        if profile.allows_isolation(level)
    ]
    return {
        "schema": EXPLAIN_SCHEMA,
        "tenant": profile.metadata.name,
        "namespace": profile.spec.namespace,
        "tier": str(profile.spec.tier),
        "isolation": {"weakest": profile.min_isolation(), "allowed": levels},
        "pools": _pools(profile, present),
        "required": _required(profile),
        "rules": [
            {"id": rule.id, "scope": "step" if rule.scope else "", "refuses": rule.message}
            for rule in rules
        ],
        "warnings": runtime_image.warnings(profile),
    }


def as_text(data: dict[str, Any]) -> str:
    lines = [
        f"tenant {data['tenant']} (namespace {data['namespace']}), tier {data['tier']}: "
        f"isolation {', '.join(data['isolation']['allowed'])} "
        f"(nothing weaker than {data['isolation']['weakest']})",
        "",
        "GPU pools:",
    ]
    for pool in data["pools"]:
        if pool["allowed"]:
            lines.append(f"  allowed  {pool['pool']}")
            lines += [f"           - {term}" for term in pool["terms"]]
        else:
            lines.append(f"  refused  {pool['pool']}: {pool['refused']}")
        if pool["rules"]:
            lines.append(f"           rules: {', '.join(pool['rules'])}")
    lines += ["", "Required of every step:"]
    lines += [f"  - {item}" for item in data["required"]]
    for scope, title in _SCOPES.items():
        rules = [rule for rule in data["rules"] if rule["scope"] == scope]
        lines += ["", f"Refused at admission, {title} ({len(rules)} rules):"]
        lines += [f"  {rule['id']}: {rule['refuses']}" for rule in rules]
    lines += [f"warning: {warning}" for warning in data["warnings"]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def as_markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# Tenant `{data['tenant']}`: what its bundle enforces",
        "",
        f"Namespace `{data['namespace']}`, tier **{data['tier']}**: isolation "
        + ", ".join(f"`{level}`" for level in data["isolation"]["allowed"])
        + f" (nothing weaker than `{data['isolation']['weakest']}`).",
        "",
        "## GPU pools",
        "",
        "| pool | allowed | terms | rules |",
        "|---|---|---|---|",
    ]
    for pool in data["pools"]:
        terms = "; ".join(pool["terms"]) if pool["allowed"] else pool["refused"]
        ids = ", ".join(f"`{rule}`" for rule in pool["rules"])
        allowed = "yes" if pool["allowed"] else "**refused**"
        lines.append(f"| {_cell(pool['pool'])} | {allowed} | {_cell(terms)} | {ids} |")
    lines += ["", "## Required of every step", ""]
    lines += [f"- {item}" for item in data["required"]]
    for scope, title in _SCOPES.items():
        rules = [rule for rule in data["rules"] if rule["scope"] == scope]
        lines += ["", f"## Refused at admission: {title}", "", "| rule | refuses |", "|---|---|"]
        lines += [f"| `{rule['id']}` | {_cell(rule['refuses'])} |" for rule in rules]
    if data["warnings"]:
        lines += ["", "## Warnings", ""]
        lines += [f"- {warning}" for warning in data["warnings"]]
    return "\n".join(lines) + "\n"
