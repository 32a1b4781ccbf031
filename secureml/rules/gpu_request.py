"""`secureml.gpuMatchesRequest`: a step pod's GPU is exactly the compiled `SECUREML_GPU_REQUEST`,
which the launcher, the shim and the audit record read (mapped by `secureml.gpu.placement`)."""

from __future__ import annotations

from secureml.core import contract
from secureml.gpu.placement import claim_template_name
from secureml.gpu.request import MIG, WIRE_FIELDS, TimeSlice, WholeGPU, wire_pattern
from secureml.nvidia import catalogue as gpu_catalogue
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import LABELS, label_is, label_present, quote, string_list
from secureml.rules.launcher import TRAINER_NODE_POD
from secureml.rules.model import Rule
from secureml.rules.resources import HUGEPAGES_PREFIX, NATIVE_RESOURCES, mig_instances
from secureml.rules.scope import system_image

RULE_ID = "secureml.gpuMatchesRequest"
_NUMBER = "[1-9][0-9]{0,19}"
_PRODUCT = '"[A-Za-z0-9][A-Za-z0-9_.-]*"'
_CLAIM_LABEL = f"{LABELS}[{quote(contract.LABEL_GPU_CLAIM)}]"
_CLAIMS = f"{SPEC}.resourceClaims"
_WHOLE_COUNT = '{"kind":"whole","count":'


def _device(key: str) -> str:
    """CEL over `key`: a resource name that is not one of the kubelet's own (a device)."""
    return f"!({key} in {string_list(NATIVE_RESOURCES)} || {key}.startsWith({quote(HUGEPAGES_PREFIX)}))"


def _no_device(var: str) -> str:
    """CEL: `var` (a container, or `spec` for pod-level resources) names no device resource."""
    res = f"dyn({var}.resources)"
    return (
        f"(!has({var}.resources) || ("
        f"(!has({res}.limits) || {res}.limits.all(k, !({_device('k')}))) && "
        f"(!has({res}.requests) || {res}.requests.all(k, !({_device('k')})))))"
    )


def _only_device(name: str) -> str:
    """CEL over container `c`: its one device resource is `name`, in limits, and in requests (if
    at all) at the same amount."""
    res = "dyn(c.resources)"
    key = quote(name)
    return (
        f"(has(c.resources) && has({res}.limits) && {key} in {res}.limits && "
        f"size({res}.limits.filter(k, {_device('k')})) == 1 && "
        f"(!has({res}.requests) || {res}.requests.all(k, !({_device('k')}) || "
        f"(k == {key} && string({res}.requests[k]) == string({res}.limits[k])))))"
    )


def _count(name: str) -> str:
    return f"string(dyn(c.resources).limits[{quote(name)}])"


def _json(kind: str, **members: str) -> str:
    """CEL string: the compact JSON `to_json` writes for `kind`, each member's value CEL text
    (`secureml.gpu.request.WIRE_FIELDS` order)."""
    assert tuple(members) == WIRE_FIELDS[kind], members
    text = quote('{"kind":"' + kind + '"')
    for name, value in members.items():
        text += " + " + quote(',"' + name + '":') + " + " + value
    return "(" + text + " + '}')"


def _whole_json(count: str) -> str:
    """CEL over `v`: a whole-GPU request of `count` (CEL text), without a product or with the one
    the pod's nodeSelector names (where it lands is what the audit says it got)."""
    key = quote(gpu_catalogue.LABEL_GPU_PRODUCT)
    product = f"'\"' + {SPEC}.nodeSelector[{key}] + '\"'"
    return (
        f"(v == {_json('whole', count=count, product=quote('null'))} || "
        f"(has({SPEC}.nodeSelector) && {key} in {SPEC}.nodeSelector && "
        f"v == {_json('whole', count=count, product=product)}))"
    )


def _timeslice_form() -> str:
    return f"v.matches({quote(wire_pattern('timeslice', memory=_NUMBER, compute=_NUMBER))})"


def _isolation(level: str) -> str:
    return label_is(contract.LABEL_ISOLATION, level)


def _device_plugin_options(profile: TenantProfile) -> list[tuple[str, str]]:
    """(CEL over `c`, `v`: the container's devices and the pod's labels are what request `v` maps
    to, the request it describes) for each request kind the profile offers."""
    gpu = profile.spec.gpu
    options: list[tuple[str, str]] = []
    if gpu.time_slice is not None:
        shared = gpu.time_slice.resource_name
        options.append(
            (
                f"({_only_device(shared)} && {_count(shared)} == '1' && "
                f"{_isolation(profile.timeslice_isolation())} && {_timeslice_form()})",
                f"TimeSlice: {shared} 1",
            )
        )
    mig = gpu.mig
    if mig is not None:
        for name in mig.allowed_profiles:
            # `single`: one allowed profile, its products pinned by secureml.migProfile.single.
            resource = (
                gpu_catalogue.mig_resource_name(name)
                if gpu.mig_strategy == "mixed"
                else gpu_catalogue.RESOURCE_GPU
            )
            request = _json("mig", profile=quote(f'"{name}"'), count=_count(resource))
            options.append(
                (
                    f"({_only_device(resource)} && {_isolation('mig')} && v == {request})",
                    f"MIG({name}, n): {resource} n",
                )
            )
    if gpu.whole_gpu is not None:
        whole = gpu_catalogue.RESOURCE_GPU
        options.append(
            (
                f"({_only_device(whole)} && {_isolation('dedicated')} && "
                f"{_whole_json(_count(whole))})",
                f"WholeGPU(n): {whole} n",
            )
        )
    return options


def _claim_is(name: str) -> str:
    """CEL: the pod's claim label is `name` (CEL text) and every claim comes from that template."""
    return (
        f"({label_present(contract.LABEL_GPU_CLAIM)} && {_CLAIM_LABEL} == {name} && "
        f"(!has({_CLAIMS}) || {_CLAIMS}.all(rc, has(rc.resourceClaimTemplateName) && "
        f"rc.resourceClaimTemplateName == {name})))"
    )


def _dra_options(profile: TenantProfile) -> list[tuple[str, str]]:
    """Like `_device_plugin_options` for DRA: the claim template (label and claims) is the
    request's (`claim_template_name`), and the container names no device resource."""
    gpu = profile.spec.gpu
    options: list[tuple[str, str]] = []
    if gpu.time_slice is not None:
        template = claim_template_name(TimeSlice(memory="1Mi", compute=1))
        options.append(
            (
                f"({_isolation(profile.timeslice_isolation())} && {_timeslice_form()} && "
                f"{_claim_is(quote(template))})",
                f"TimeSlice: claim template {template}",
            )
        )
    if gpu.mig is not None:
        for name in gpu.mig.allowed_profiles:
            most = mig_instances(profile, name)
            counts = string_list(str(n) for n in range(1, most + 1))
            one = claim_template_name(MIG(name))
            template = f"(n == '1' ? {quote(one)} : {quote(one + '-x')} + n)"
            request = _json("mig", profile=quote(f'"{name}"'), count="n")
            options.append(
                (
                    f"({_isolation('mig')} && {counts}.exists(n, v == {request} && "
                    f"{_claim_is(template)}))",
                    f"MIG({name}, n): claim template {one}[-xn]",
                )
            )
    if gpu.whole_gpu is not None:
        counts = string_list(str(n) for n in range(1, gpu.whole_gpu.max_per_step + 1))
        bare = claim_template_name(WholeGPU(1)).removesuffix("1")
        product = wire_pattern("whole", count="[0-9]+", product=_PRODUCT)
        # A product's template name is its name in lower case (no function both engines share
        # computes it): the count is pinned, the suffix left to secureml.resourceClaims.
        by_product = (
            f"(v.matches({quote(product)}) && "
            f"v.startsWith({quote(_WHOLE_COUNT)} + n + ',') && "
            f"{label_present(contract.LABEL_GPU_CLAIM)} && "
            f"{_CLAIM_LABEL}.startsWith({quote(bare)} + n + '-') && "
            f"(!has({_CLAIMS}) || {_CLAIMS}.all(rc, has(rc.resourceClaimTemplateName) && "
            f"rc.resourceClaimTemplateName == {_CLAIM_LABEL})))"
        )
        plain = f"(v == {_json('whole', count='n', product=quote('null'))} && {_claim_is(quote(bare) + ' + n')})"
        options.append(
            (
                f"({_isolation('dedicated')} && {counts}.exists(n, {plain} || {by_product}))",
                f"WholeGPU(n): claim template {bare}n",
            )
        )
    return options


def _requests(var: str = "c") -> str:
    """CEL: the values of container `var`'s SECUREML_GPU_REQUEST entries (a list)."""
    name = quote(contract.ENV_GPU_REQUEST)
    return (
        f"(has({var}.env) ? {var}.env.filter(e, e.name == {name} && has(e.value))"
        f".map(e, e.value) : [])"
    )


def _no_request(profile: TenantProfile) -> str:
    """CEL: what a step without a request carries: no device, no claim, no request annotation,
    isolation `none`."""
    annotation = quote(contract.ANNOTATION_GPU_REQUEST)
    parts = [
        _no_device("c"),
        _isolation(contract.ISOLATION_NONE),
        f"!(has(object.metadata.annotations) && {annotation} in object.metadata.annotations)",
    ]
    if profile.spec.gpu.backend == "dra":
        parts += [
            f"!{label_present(contract.LABEL_GPU_CLAIM)}",
            f"(!has({_CLAIMS}) || size({_CLAIMS}) == 0)",
        ]
    return "(" + " && ".join(parts) + ")"


def _step_container(var: str = "c") -> str:
    step = f"({TRAINER_NODE_POD} ? {quote(contract.TRAINER_NODE_CONTAINER)} : {quote(contract.KFP_MAIN_CONTAINER)})"
    return f"({var}.name == {step} && !{system_image(var)})"


def gpu_request_rule(profile: TenantProfile) -> Rule:
    dra = profile.spec.gpu.backend == "dra"
    options = _dra_options(profile) if dra else _device_plugin_options(profile)
    matches = " || ".join(f"({cel} && {_no_device('c')})" if dra else cel for cel, _ in options)
    step_ok = (
        f"[{_requests()}].all(r, size(r) == 0 ? {_no_request(profile)} : "
        f"r.all(v, {matches or 'false'}))"
    )
    others = [
        f"(!has({SPEC}.{lst}) || {SPEC}.{lst}.all(c, {_no_device('c')}))"
        for lst in CONTAINER_LISTS
        if lst != "containers"
    ]
    held = f"{SPEC}.containers.exists(c, {_step_container()} && size({_requests()}) > 0)"
    unclaimed = f"(!has({_CLAIMS}) || size({_CLAIMS}) == 0)"
    if dra:
        unclaimed = f"(!{label_present(contract.LABEL_GPU_CLAIM)} && {unclaimed})"
    else:
        held = "false"  # a device-plugin tenant's GPUs are never claims
    expression = " && ".join(
        [
            f"{SPEC}.containers.all(c, {_step_container()} ? {step_ok} : {_no_device('c')})",
            *others,
            _no_device(SPEC),
            f"({unclaimed} || {held})",
        ]
    )
    mapped = "; ".join(text for _, text in options) or "none"
    message = (
        f"the step's GPU must be exactly what its {contract.ENV_GPU_REQUEST} compiles to under "
        f"the profile ({mapped}; isolation label to match), no other container may hold a "
        "device, and a step without a request holds none"
    )
    return tenant_rule(profile, RULE_ID, message, expression, _message(step_ok))


def _message(step_ok: str) -> str:
    """Names the container and its request, or the container holding a device without one."""
    step = f"{SPEC}.containers.filter(c, {_step_container()} && !({step_ok}))"
    fix = (
        "; recompile the step with the GPU it needs (secureml compile writes the request, the "
        "resources and the labels together) instead of editing the pod"
    )
    request_text = f"[{_requests()}].map(r, size(r) == 0 ? 'no request' : r[0])[0]"
    holders = " + ".join(
        f"(has({SPEC}.{lst}) ? {SPEC}.{lst}.filter(c, !{_step_container()} && !({_no_device('c')}))"
        f".map(c, c.name) : [])"
        for lst in CONTAINER_LISTS
    )
    return (
        f"size({step}) > 0 ? {step}.map(c, 'container \"' + c.name + '\" holds a GPU that is not "
        f"what its {contract.ENV_GPU_REQUEST} (' + {request_text} + ') compiles to' + "
        f"{quote(fix)})[0] : "
        f"[{holders}].map(n, size(n) > 0 ? 'container \"' + n[0] + '\" holds a device resource "
        f"but is not the step container with a {contract.ENV_GPU_REQUEST}' + {quote(fix)} : "
        f"{quote('pod holds a device (pod-level resources or a claim) without a ' + contract.ENV_GPU_REQUEST + ' on the step container' + fix)})[0]"
    )


def gpu_request_rules(profile: TenantProfile) -> list[Rule]:
    return [gpu_request_rule(profile)]
