"""Where a pod may run: the placement the compiler writes, and nothing a pod author adds."""

from __future__ import annotations

from secureml.gpu import placement as gpu
from secureml.nvidia import catalogue as gpu_catalogue
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, has_path
from secureml.rules.cel.text import quote, string_list
from secureml.rules.model import Rule
from secureml.rules.resources import granted_resources
from secureml.rules.scope import EVERY_POD, STEP_POD

# Added to every pod by the API server's DefaultTolerationSeconds admission plugin.
DEFAULT_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    ("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
)
# Node labels that name a platform, not a pool: harmless in a selector.
PLATFORM_LABELS = {"kubernetes.io/os": ["linux"], "kubernetes.io/arch": ["amd64", "arm64"]}

_AFFINITY = f"{SPEC}.affinity"
_REQUIRED = f"{_AFFINITY}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def gpu_pools(profile: TenantProfile) -> dict[str, list[str]]:
    """Node label values of the GPU pools the profile names (`gpu.gpu_pool_labels`)."""
    return gpu.gpu_pool_labels(profile)


def selector_values(profile: TenantProfile) -> dict[str, list[str] | None]:
    """Node label -> the values a pod of the tenant may select (None: any value)."""
    settings = profile.spec.gpu
    allowed: dict[str, list[str] | None] = {k: list(v) for k, v in PLATFORM_LABELS.items()}
    allowed.update(gpu_pools(profile))
    allowed.update({k: [v] for k, v in gpu.confidential_selector(profile).items()})
    products: set[str] | None = set()
    mig = settings.mig
    if mig is not None and settings.mig_strategy == "single":
        for name in mig.allowed_profiles:
            products.update(gpu_catalogue.mig_product_names(name, list(settings.models)))  # type: ignore[union-attr]
    if settings.whole_gpu is not None:
        known = [gpu_catalogue.MIG_CATALOGUE.get(name) for name in settings.models]
        if settings.models and all(known):
            products.update(p for model in known if model for p in model.products)  # type: ignore[union-attr]
        else:  # the compiler checks WholeGPU(product=...) only against known models
            products = None
    if products is None or products:
        allowed[gpu_catalogue.LABEL_GPU_PRODUCT] = None if products is None else sorted(products)
    return dict(sorted(allowed.items()))


def _text(var: str, field: str, default: str) -> str:
    return f"(has({var}.{field}) ? {var}.{field} : {quote(default)})"


def _written(parts: tuple[str, str, str, str]) -> str:
    """A toleration as a person reads it: `key=k operator=Equal value=v effect=NoSchedule`."""
    key, operator, value, effect = parts
    return f"key={key} operator={operator} value={value} effect={effect}"


def _tolerations(profile: TenantProfile) -> Rule:
    allowed = list(DEFAULT_TOLERATIONS)
    whole = profile.spec.gpu.whole_gpu
    for toleration in whole.tolerations if whole is not None else []:
        allowed.append(
            (
                toleration.key or "",
                toleration.operator,
                toleration.value or "",
                toleration.effect or "",
            )
        )
    shapes = string_list(sorted({"|".join(parts) for parts in allowed}))
    shape = " + '|' + ".join(
        _text("t", field, default)
        for field, default in (("key", ""), ("operator", "Equal"), ("value", ""), ("effect", ""))
    )
    keyless_exists = (
        f"(({_text('t', 'key', '')}) == '' && {_text('t', 'operator', 'Equal')} == 'Exists')"
    )
    ok = f"(!{keyless_exists} && ({shape}) in {shapes})"
    own = "; ".join(sorted({_written(p) for p in allowed[len(DEFAULT_TOLERATIONS) :]})) or "none"
    message = (
        f"tolerations only those of the tenant's own pools ({own}) and the API server's default "
        "not-ready/unreachable ones; never Exists without a key"
    )
    written = " + ".join(
        f"{quote(label)} + {_text('t', field, default)}"
        for label, field, default in (
            ("key=", "key", ""),
            (" operator=", "operator", "Equal"),
            (" value=", "value", ""),
            (" effect=", "effect", ""),
        )
    )
    bad = f"{SPEC}.tolerations.filter(t, !{ok})"
    return tenant_rule(
        profile,
        "secureml.tolerations",
        message,
        f"!has({SPEC}.tolerations) || {SPEC}.tolerations.all(t, {ok})",
        f"'pod tolerates ' + [{bad}[0]].map(t, {written})[0] + ', which is not one of its "
        "pools; remove it (the compiler adds the tolerations of the pools the step needs)'",
        scope=EVERY_POD,
    )


def _values_ok(allowed: dict[str, list[str] | None], key: str, values: str) -> str:
    """CEL: every value in `values` (a list expression) is allowed for the label `key` (an expr)."""
    fixed = {k: v for k, v in allowed.items() if v is not None}
    anything = [k for k, v in allowed.items() if v is None]
    fixed_map = "{" + ", ".join(f"{quote(k)}: {string_list(v)}" for k, v in fixed.items()) + "}"
    parts = [f"({key} in {fixed_map} && {values}.all(v, v in {fixed_map}[{key}]))"]
    if anything:
        parts.append(f"{key} in {string_list(anything)}")
    return "(" + " || ".join(parts) + ")"


def _node_selector(profile: TenantProfile) -> Rule:
    allowed = selector_values(profile)
    ok = _values_ok(allowed, "k", f"[{SPEC}.nodeSelector[k]]")
    message = f"nodeSelector only the tenant's pool labels ({_describe(allowed)})"
    return tenant_rule(
        profile,
        "secureml.nodeSelector",
        message,
        f"!has({SPEC}.nodeSelector) || {SPEC}.nodeSelector.all(k, {ok})",
        # A static text: the order a map is iterated in is not the same in both engines.
        quote(
            f"pod's nodeSelector names a node label outside the tenant's pools ({_describe(allowed)})"
        ),
        scope=EVERY_POD,
    )


def _describe(allowed: dict[str, list[str] | None]) -> str:
    return "; ".join(f"{k}={'|'.join(v) if v is not None else '*'}" for k, v in allowed.items())


def _node_affinity(profile: TenantProfile) -> Rule:
    allowed = selector_values(profile)
    pools = gpu_pools(profile)
    values = "(has(e.values) ? e.values : [])"
    include = f"(e.operator == 'In' && {_values_ok(allowed, 'e.key', values)})"
    exclude_parts = ["false"]
    if pools:
        pool_map = "{" + ", ".join(f"{quote(k)}: {string_list(v)}" for k, v in pools.items()) + "}"
        exclude_parts = [
            f"(e.key in {pool_map} && (e.operator == 'DoesNotExist' || (e.operator == 'NotIn' && "
            f"{values}.all(v, v in {pool_map}[e.key]))))"
        ]
    expression_ok = f"({include} || {' || '.join(exclude_parts)})"
    term_ok = (
        "(!has(t.matchFields) || size(t.matchFields) == 0) && "
        f"(!has(t.matchExpressions) || t.matchExpressions.all(e, {expression_ok}))"
    )
    node = f"{_AFFINITY}.nodeAffinity"
    preferred = f"{node}.preferredDuringSchedulingIgnoredDuringExecution"
    required_ok = (
        f"(!{has_path(SPEC, 'affinity', 'nodeAffinity', 'requiredDuringSchedulingIgnoredDuringExecution')}"
        f" || !has({_REQUIRED}.nodeSelectorTerms) || {_REQUIRED}.nodeSelectorTerms.all(t, {term_ok}))"
    )
    preferred_ok = (
        f"(!{has_path(SPEC, 'affinity', 'nodeAffinity', 'preferredDuringSchedulingIgnoredDuringExecution')}"
        f" || size({preferred}) == 0)"
    )
    message = (
        "node affinity only required terms over the tenant's pool labels (In over "
        f"{_describe(allowed)}; NotIn/DoesNotExist on its GPU pool labels), no matchFields, no "
        "preferred terms"
    )
    return tenant_rule(
        profile,
        "secureml.nodeAffinity",
        message,
        f"{required_ok} && {preferred_ok}",
        f"!{preferred_ok} ? 'pod must not set a preferred node affinity' : "
        + quote("pod's required node affinity names nodes outside the tenant's pools"),
        scope=EVERY_POD,
    )


def _gpu_free_off_gpu_nodes(profile: TenantProfile) -> Rule | None:
    pools = gpu_pools(profile)
    if not pools:
        return None
    granted = string_list(r.name for r in granted_resources(profile))
    holds = (
        "(has(c.resources) && ("
        f"(has(dyn(c.resources).limits) && dyn(c.resources).limits.exists(k, k in {granted})) || "
        f"(has(dyn(c.resources).requests) && dyn(c.resources).requests.exists(k, k in {granted}))))"
    )
    asks_gpu = " || ".join(
        [
            *(f"(has({SPEC}.{lst}) && {SPEC}.{lst}.exists(c, {holds}))" for lst in CONTAINER_LISTS),
            f"(has({SPEC}.resourceClaims) && size({SPEC}.resourceClaims) > 0)",
        ]
    )
    excludes = " && ".join(
        f"t.matchExpressions.exists(e, e.key == {quote(key)} && (e.operator == 'DoesNotExist' || "
        f"(e.operator == 'NotIn' && has(e.values) && {quote(value)} in e.values)))"
        for key, values in pools.items()
        for value in values
    )
    term_ok = f"(has(t.matchExpressions) && {excludes})"
    required_ok = (
        f"({has_path(SPEC, 'affinity', 'nodeAffinity', 'requiredDuringSchedulingIgnoredDuringExecution', 'nodeSelectorTerms')}"
        f" && size({_REQUIRED}.nodeSelectorTerms) > 0 && {_REQUIRED}.nodeSelectorTerms.all(t, {term_ok}))"
    )
    wanted = ", ".join(f"{k} NotIn {'|'.join(v)}" for k, v in pools.items())
    message = (
        "a step without a GPU must keep off the GPU pools: every required node affinity term "
        f"excludes {wanted}"
    )
    return tenant_rule(
        profile,
        "secureml.gpuFreeOffGpuNodes",
        message,
        f"({asks_gpu}) || {required_ok}",
        quote(
            "pod holds no GPU this tenant is granted (no granted GPU resource, no claim), so it "
            f"must keep off the GPU pools: give it a required node affinity that excludes {wanted} "
            "(the compiler writes it), or ask for a GPU the profile grants"
        ),
        STEP_POD,
    )


def _pod_affinity_namespaces(profile: TenantProfile) -> Rule:
    own = string_list([profile.spec.namespace])
    term_ok = (
        f"(!has(t.namespaceSelector) && (!has(t.namespaces) || t.namespaces.all(n, n in {own})))"
    )
    checks = []
    for kind in ("podAffinity", "podAntiAffinity"):
        base = f"{_AFFINITY}.{kind}"
        required = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        preferred = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
        checks.append(
            f"(!{has_path(SPEC, 'affinity', kind)} || ("
            f"(!has({required}) || {required}.all(t, {term_ok})) && "
            f"(!has({preferred}) || {preferred}.all(w, !has(w.podAffinityTerm) || "
            f"[w.podAffinityTerm].all(t, {term_ok})))))"
        )
    message = (
        "pod affinity and anti-affinity only within the tenant's namespace "
        f"({profile.spec.namespace}): no namespaceSelector, no other namespaces"
    )
    return tenant_rule(
        profile,
        "secureml.podAffinityNamespaces",
        message,
        " && ".join(checks),
        quote("pod (anti-)affinity must not reach pods of another namespace"),
        scope=EVERY_POD,
    )


def _priority_class(profile: TenantProfile) -> Rule:
    names = list(profile.spec.scheduling.priority_class_names)
    listed = ", ".join(names) or "none"
    message = f"priorityClassName only from the profile's list ({listed})"
    return tenant_rule(
        profile,
        "secureml.priorityClass",
        message,
        f"!has({SPEC}.priorityClassName) || {SPEC}.priorityClassName in {string_list(names)}",
        f"'pod must not use priorityClassName ' + {SPEC}.priorityClassName + "
        f"{quote(f' (allowed: {listed})')}",
        scope=EVERY_POD,
    )


def _scheduler_name(profile: TenantProfile) -> Rule:
    name = profile.spec.scheduling.scheduler_name
    return tenant_rule(
        profile,
        "secureml.schedulerName",
        f"schedulerName unset or {name}",
        f"!has({SPEC}.schedulerName) || {SPEC}.schedulerName == {quote(name)}",
        f"'pod must not use schedulerName ' + {SPEC}.schedulerName + {quote(f' (only {name})')}",
        scope=EVERY_POD,
    )


def _node_name(profile: TenantProfile) -> Rule:
    return tenant_rule(
        profile,
        "secureml.nodeName",
        "pod must not set spec.nodeName: it skips the scheduler, the pool's taints and selectors",
        # CREATE only (`oldObject` is null then): a bound pod's UPDATEs carry the scheduler's.
        f"oldObject != null || !has({SPEC}.nodeName)",
        f"'pod must not set spec.nodeName (' + {SPEC}.nodeName + '): the scheduler places it'",
        scope=EVERY_POD,
    )


def placement_rules(profile: TenantProfile) -> list[Rule]:
    """The scheduling rules of `profile` (contract: docs/admission-rules.md)."""
    rules = [
        _node_name(profile),
        _tolerations(profile),
        _node_selector(profile),
        _node_affinity(profile),
        _pod_affinity_namespaces(profile),
        _priority_class(profile),
        _scheduler_name(profile),
    ]
    off_gpu = _gpu_free_off_gpu_nodes(profile)
    if off_gpu is not None:
        rules.append(off_gpu)
    return rules
