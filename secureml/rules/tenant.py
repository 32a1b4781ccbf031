"""secureml's own admission rules for one tenant, with the profile's values baked in as literals."""

from __future__ import annotations

from secureml.core import contract
from secureml.core.contract import ISOLATION_TIMESLICE_SHIM
from secureml.gpu.request import wire_pattern
from secureml.nvidia.catalogue import (
    LABEL_GPU_PRODUCT,
    MIG_RESOURCE_PREFIX,
    NVIDIA_RESOURCE_PREFIX,
    RESOURCE_GPU,
)
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import (
    SPEC,
    container_rule_message,
    every_container,
    has_path,
    inherited_setting,
    int_range_regex,
)
from secureml.rules.cel.text import LABELS, label_in, label_is, quote, string_list
from secureml.rules.model import Rule
from secureml.rules.runtime import runtime_image_container
from secureml.rules.scope import EVERY_POD, STEP_POD, system_container

_LABELS = LABELS
_ANNOTATIONS = "object.metadata.annotations"
_ISOLATION = f"{_LABELS}[{quote(contract.LABEL_ISOLATION)}]"


def _label_is(value: str) -> str:
    return label_is(contract.LABEL_ISOLATION, value)


def _label_in(values: list[str]) -> str:
    return label_in(contract.LABEL_ISOLATION, values)


def _annotation(name: str) -> str:
    return f"{_ANNOTATIONS}[{quote(name)}]"


def _has_annotation(name: str) -> str:
    return f"(has({_ANNOTATIONS}) && {quote(name)} in {_ANNOTATIONS})"


def _resource_keys_all(key_ok: str, var: str = "c") -> str:
    """Every resource name a container limits or requests satisfies `key_ok` (over `k`)."""
    return (
        f"(!has({var}.resources) || ("
        f"(!has(dyn({var}.resources).limits) || dyn({var}.resources).limits.all(k, {key_ok})) && "
        f"(!has(dyn({var}.resources).requests) || dyn({var}.resources).requests.all(k, {key_ok}))))"
    )


def _any_container_requests(key_match: str) -> str:
    """Some container limits or requests a resource whose name satisfies `key_match` (over `k`)."""
    one = (
        "(has(c.resources) && ("
        f"(has(dyn(c.resources).limits) && dyn(c.resources).limits.exists(k, {key_match})) || "
        f"(has(dyn(c.resources).requests) && dyn(c.resources).requests.exists(k, {key_match}))))"
    )
    parts = [f"(has({SPEC}.{lst}) && {SPEC}.{lst}.exists(c, {one}))" for lst in CONTAINER_LISTS]
    return "(" + " || ".join(parts) + ")"


class _Catalogue:
    """Builds the rules of one profile; each method returns the rules of one concern."""

    def __init__(self, profile: TenantProfile) -> None:
        self.profile = profile
        self.spec = profile.spec
        self.gpu = profile.spec.gpu

    def rule(
        self,
        rule_id: str,
        message: str,
        expression: str,
        message_expression: str,
        scope: str = STEP_POD,
    ) -> Rule:
        """A step rule by default; `scope=EVERY_POD` for the rules KFP's own pods must pass too."""
        return tenant_rule(self.profile, rule_id, message, expression, message_expression, scope)

    def container_rule(
        self, rule_id: str, message: str, predicate: str, scope: str = STEP_POD
    ) -> Rule:
        return self.rule(
            rule_id,
            message,
            every_container(predicate),
            container_rule_message(predicate, message),
            scope,
        )

    # --- labels and isolation ------------------------------------------------------------------
    def labels(self) -> list[Rule]:
        required = string_list(contract.REQUIRED_LABELS)
        tenant = self.profile.metadata.name
        present = f"{required}.all(l, l in {_LABELS} && {_LABELS}[l] != '')"
        tenant_ok = f"{_LABELS}[{quote(contract.LABEL_TENANT)}] == {quote(tenant)}"
        missing = f"{required}.filter(l, !(has({_LABELS}) && l in {_LABELS} && {_LABELS}[l] != ''))"
        return [
            self.rule(
                "secureml.requiredLabels",
                f"pod must carry the labels {', '.join(contract.REQUIRED_LABELS)} "
                f"with {contract.LABEL_TENANT}={tenant}",
                f"has({_LABELS}) && {present} && {tenant_ok}",
                f"size({missing}) > 0 ? 'pod is missing the label ' + {missing}[0] : "
                f"'pod label {contract.LABEL_TENANT} must be {tenant}, not ' + "
                f"{_LABELS}[{quote(contract.LABEL_TENANT)}]",
            )
        ]

    def isolation(self) -> list[Rule]:
        allowed = [lvl for lvl in contract.ISOLATION_LEVELS if self.profile.allows_isolation(lvl)]
        allowed.append(contract.ISOLATION_NONE)
        key = quote(contract.LABEL_ISOLATION)
        return [
            self.rule(
                "secureml.isolationLevel",
                f"tier {self.spec.tier} allows isolation {', '.join(allowed)} only",
                _label_in(allowed),
                f"(has({_LABELS}) && {key} in {_LABELS}) ? 'pod isolation label ' + {_ISOLATION} + "
                f"' is not one tier {self.spec.tier} allows ({', '.join(allowed)}): ask for a GPU of "
                "that isolation (the compiler sets the label from the request)' : "
                f"'pod has no {contract.LABEL_ISOLATION} label; tier {self.spec.tier} allows "
                f"{', '.join(allowed)}: compile the step with secureml, which sets it'",
            )
        ]

    def gpu_matches_label(self) -> list[Rule]:
        """The isolation label tells the truth about the GPU the pod asks for."""
        checks: list[str] = []
        timeslice_level = self.profile.timeslice_isolation()
        if self.gpu.time_slice is not None and self.gpu.backend == "device-plugin":
            shared = quote(self.gpu.time_slice.resource_name)
            checks.append(
                f"(!{_any_container_requests(f'k == {shared}')} || {_label_is(timeslice_level)})"
            )
        checks.append(
            f"(!{_any_container_requests(f'k.startsWith({quote(MIG_RESOURCE_PREFIX)})')} || {_label_is('mig')})"
        )
        whole_levels = ["dedicated"]
        if self.gpu.mig_strategy == "single" and self.gpu.mig is not None:
            whole_levels.append("mig")
        checks.append(
            f"(!{_any_container_requests(f'k == {quote(RESOURCE_GPU)}')} || {_label_in(whole_levels)})"
        )
        gpu_free = (
            f"(!{_any_container_requests(f'k.startsWith({quote(NVIDIA_RESOURCE_PREFIX)})')} && "
            f"(!has({SPEC}.resourceClaims) || size({SPEC}.resourceClaims) == 0))"
        )
        checks.append(f"(!{_label_is(contract.ISOLATION_NONE)} || {gpu_free})")
        return [
            self.rule(
                "secureml.isolationMatchesGpu",
                f"pod label {contract.LABEL_ISOLATION} must match the GPU it requests "
                f"(time-sliced: {timeslice_level}, MIG: mig, whole GPU: {'/'.join(whole_levels)}, "
                "no GPU: none)",
                " && ".join(checks),
                quote(
                    f"pod label {contract.LABEL_ISOLATION} does not match the GPU resources it "
                    "requests"
                ),
            )
        ]

    # --- GPU resources ---------------------------------------------------------------------------
    def gpu_resources(self) -> list[Rule]:
        """Which GPU resources a container may name, and how many of them: one rule per concern."""
        gpu = self.gpu
        device_plugin = gpu.backend == "device-plugin"
        rules = [self._gpu_resource_name(), self._mig_profile()]
        if device_plugin and gpu.whole_gpu is not None:
            rules.append(self._whole_gpu_count(gpu.whole_gpu.max_per_step))
            if gpu.whole_gpu.node_selector:
                rules.append(self._dedicated_pool(dict(gpu.whole_gpu.node_selector)))
        if device_plugin and gpu.time_slice is not None:
            rules.append(self._time_slice_count(gpu.time_slice.resource_name))
        if self._single_mig and gpu.mig is not None:
            rules.append(self._mig_single(list(gpu.mig.allowed_profiles)))
        return rules

    @property
    def _single_mig(self) -> bool:
        """MIG on the `single` strategy: MIG instances are asked for as nvidia.com/gpu."""
        gpu = self.gpu
        return (
            gpu.backend == "device-plugin" and gpu.mig is not None and gpu.mig_strategy == "single"
        )

    @property
    def _asks_gpu(self) -> str:
        return _any_container_requests(f"k == {quote(RESOURCE_GPU)}")

    def _gpu_resource_name(self) -> Rule:
        """No NVIDIA resource but the profile's whole-GPU, time-slice and MIG resources."""
        gpu = self.gpu
        names: list[str] = []
        if gpu.backend == "device-plugin":
            if gpu.whole_gpu is not None or self._single_mig:
                names.append(RESOURCE_GPU)
            if gpu.time_slice is not None:
                names.append(gpu.time_slice.resource_name)
        key_ok = (
            f"!k.startsWith({quote(NVIDIA_RESOURCE_PREFIX)}) || k.startsWith({quote(MIG_RESOURCE_PREFIX)}) || "
            f"k in {string_list(names)}"
        )
        if names:
            allowed_text = ", ".join(names)
        elif gpu.backend == "dra":
            allowed_text = "none (this tenant's GPUs come from DRA claims)"
        else:
            allowed_text = "none besides the allowed MIG profiles"
        return self.container_rule(
            "secureml.gpuResourceName",
            f"must request no GPU resource but {allowed_text}",
            _resource_keys_all(key_ok),
        )

    def _mig_profile(self) -> Rule:
        """MIG resources (`mixed` strategy) only of the allowed profiles."""
        gpu = self.gpu
        mig_names: list[str] = []
        if gpu.backend == "device-plugin" and gpu.mig is not None and gpu.mig_strategy == "mixed":
            mig_names = [f"{MIG_RESOURCE_PREFIX}{p}" for p in gpu.mig.allowed_profiles]
        mig_ok = f"!k.startsWith({quote(MIG_RESOURCE_PREFIX)}) || k in {string_list(mig_names)}"
        return self.container_rule(
            "secureml.migProfile",
            f"must request no MIG profile but {', '.join(mig_names) if mig_names else 'none'}",
            _resource_keys_all(mig_ok),
        )

    def _whole_gpu_count(self, max_per_step: int) -> Rule:
        """At most `maxPerStep` whole GPUs per container. On the `single` strategy nvidia.com/gpu on
        a pod labelled `mig` is a MIG instance, checked by secureml.migProfile.single instead."""
        counts = string_list(str(n) for n in range(1, max_per_step + 1))
        count_ok = (
            f"!(k == {quote(RESOURCE_GPU)}) || string(dyn(c.resources).limits[k]) in {counts}"
        )
        predicate = f"(!(has(c.resources) && has(dyn(c.resources).limits)) || dyn(c.resources).limits.all(k, {count_ok}))"
        message = (
            f"must request at most {max_per_step} whole GPU(s) "
            f"({RESOURCE_GPU} limit 1..{max_per_step})"
        )
        counted = every_container(predicate)
        if self._single_mig:
            counted = f"{_label_is('mig')} || {counted}"
        return self.rule(
            "secureml.wholeGpuCount", message, counted, container_rule_message(predicate, message)
        )

    def _dedicated_pool(self, node_selector: dict[str, str]) -> Rule:
        """A pod with whole GPUs selects the tenant's dedicated pool (MIG pods on `single` aside)."""
        selector = " && ".join(
            f"({quote(k)} in {SPEC}.nodeSelector && {SPEC}.nodeSelector[{quote(k)}] == {quote(v)})"
            for k, v in sorted(node_selector.items())
        )
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(node_selector.items()))
        not_mig = f"!{_label_is('mig')} && " if self._single_mig else ""
        return self.rule(
            "secureml.dedicatedPool",
            f"a pod with whole GPUs must select the tenant's dedicated pool ({wanted})",
            f"!({not_mig}{self._asks_gpu}) || (has({SPEC}.nodeSelector) && {selector})",
            quote(f"pod requests whole GPUs but does not select the dedicated pool ({wanted})"),
        )

    def _time_slice_count(self, shared: str) -> Rule:
        """One time-sliced share per container: the shim's limits are per container, and a second
        replica of the same GPU would double them. (Not a LimitRange `max`: see bundle/kubeflow.py.)
        Extended resources need a limit whenever they are requested, so checking limits suffices."""
        count_ok = f"!(k == {quote(shared)}) || string(dyn(c.resources).limits[k]) == '1'"
        return self.container_rule(
            "secureml.timeSliceCount",
            f"must request at most one time-sliced share ({shared} limit 1)",
            f"(!(has(c.resources) && has(dyn(c.resources).limits)) || dyn(c.resources).limits.all(k, {count_ok}))",
        )

    def _mig_single(self, allowed_profiles: list[str]) -> Rule:
        """`single` strategy: nvidia.com/gpu on a `mig` pod must be pinned to MIG products.

        The compiler (gpu.placement) writes one product as a nodeSelector and several as a required
        node affinity `In`. Either holds the pod to the MIG-suffixed products of the allowed
        profiles; the terms of a required affinity are ORed, so every term must name the product
        key, and every expression on that key must be `In` over those products (its expressions
        are ANDed, so other keys only narrow it). Without a product constraint nvidia.com/gpu would
        get a whole GPU or any MIG instance.
        """
        from secureml.nvidia.catalogue import mig_product_names

        models = list(self.gpu.models)
        products = sorted({name for p in allowed_profiles for name in mig_product_names(p, models)})
        allowed = string_list(products)
        key = quote(LABEL_GPU_PRODUCT)
        selector_ok = (
            f"(has({SPEC}.nodeSelector) && {key} in {SPEC}.nodeSelector && "
            f"{SPEC}.nodeSelector[{key}] in {allowed})"
        )
        on_key = f"(has(e.key) && e.key == {key})"
        term_ok = (
            f"(has(t.matchExpressions) && t.matchExpressions.exists(e, {on_key}) && "
            f"t.matchExpressions.all(e, !{on_key} || (has(e.operator) && e.operator == 'In' && "
            f"has(e.values) && e.values.all(v, v in {allowed}))))"
        )
        required = f"{SPEC}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        affinity_ok = (
            f"({has_path(SPEC, 'affinity', 'nodeAffinity', 'requiredDuringSchedulingIgnoredDuringExecution', 'nodeSelectorTerms')}"
            f" && size({required}.nodeSelectorTerms) > 0 && {required}.nodeSelectorTerms.all(t, {term_ok}))"
        )
        ok = f"({_label_is('mig')} && ({selector_ok} || {affinity_ok}))"
        labels = "mig"
        whole_text = ""
        if self.gpu.whole_gpu is not None:
            ok = f"{ok} || {_label_is('dedicated')}"
            labels = "mig or dedicated"
            whole_text = f" (or be labelled {contract.LABEL_ISOLATION}=dedicated for whole GPUs)"
        constraint = (
            f"{LABEL_GPU_PRODUCT} by a nodeSelector, or by a required node affinity whose every term "
            f"has only In over {', '.join(products) or 'no product'}"
        )
        return self.rule(
            "secureml.migProfile.single",
            f"a pod asking for {RESOURCE_GPU} (MIG strategy single) must be labelled "
            f"{contract.LABEL_ISOLATION}=mig and pin {constraint}{whole_text}",
            f"!{self._asks_gpu} || {ok}",
            f"{_label_is('mig')} ? {quote('MIG pod (strategy single) must pin ' + constraint)} : "
            + quote(
                f"pod asks for {RESOURCE_GPU} on a MIG single-strategy tenant but is not labelled "
                f"{contract.LABEL_ISOLATION}={labels}"
            ),
        )

    def claims(self) -> list[Rule]:
        claims = f"{SPEC}.resourceClaims"
        if self.gpu.backend == "device-plugin":
            return [
                self.rule(
                    "secureml.resourceClaims",
                    "pod must not use DRA resource claims: this tenant's GPUs come from the device plugin",
                    f"!has({claims}) || size({claims}) == 0",
                    quote("pod must not set spec.resourceClaims (device-plugin tenant)"),
                )
            ]
        label = quote(contract.LABEL_GPU_CLAIM)
        template = "rc.resourceClaimTemplateName"
        kinds = self._claim_kinds(template)
        template_ok = (
            f"has(rc.resourceClaimTemplateName) && !has(rc.resourceClaimName) && "
            f"has({_LABELS}) && {label} in {_LABELS} && {template} == {_LABELS}[{label}] && "
            f"({' || '.join(kinds) if kinds else 'false'})"
        )
        return [
            self.rule(
                "secureml.resourceClaims",
                "each resource claim must come from a ResourceClaimTemplate of the tenant bundle that "
                f"the profile allows, named by the pod label {contract.LABEL_GPU_CLAIM} and matching "
                f"the label {contract.LABEL_ISOLATION} (no shared, pre-created claims)",
                f"!has({claims}) || {claims}.all(rc, {template_ok})",
                f"'resource claim \"' + {claims}.filter(rc, !({template_ok}))[0].name + "
                f"'\" must use an allowed resourceClaimTemplateName equal to label {contract.LABEL_GPU_CLAIM}'",
            ),
            self.rule(
                "secureml.claimCount",
                "at most one resource claim per step pod: the profile grants one GPU request a step",
                f"!has({claims}) || size({claims}) <= 1",
                f"'pod has ' + string(size({claims})) + ' resource claims; a step holds one GPU "
                "request: remove all but the one the compiler wrote'",
            ),
            self.container_rule(
                "secureml.claimHolders",
                "only the step's own container (main, or a trainer node's node) holds a resource "
                "claim: KFP's and Argo's containers run outside the launcher, the watchdog and the shim",
                "c.name in ['main', 'node'] || !has(c.resources) || !has(c.resources.claims) || "
                "size(c.resources.claims) == 0",
            ),
        ]

    def _claim_kinds(self, template: str) -> list[str]:
        """CEL conditions, one per GPU kind the profile allows: template name and isolation label."""
        from secureml.gpu.placement import claim_template_name
        from secureml.gpu.request import MIG, TimeSlice

        gpu = self.gpu
        kinds: list[str] = []
        if gpu.mig is not None and gpu.mig.allowed_profiles:
            names = [claim_template_name(MIG(p)) for p in gpu.mig.allowed_profiles]
            match = " || ".join(
                f"{template} == {quote(n)} || {template}.startsWith({quote(n + '-x')})"
                for n in names
            )
            kinds.append(f"(({match}) && {_label_is('mig')})")
        if gpu.time_slice is not None:
            level = self.profile.timeslice_isolation()
            name = claim_template_name(TimeSlice(memory="1Mi", compute=1))
            kinds.append(f"({template} == {quote(name)} && {_label_is(level)})")
        if gpu.whole_gpu is not None:
            counts = int_range_regex(1, gpu.whole_gpu.max_per_step)
            pattern = f"^secureml-gpu-{counts}(-[a-z0-9-]+)?$"
            kinds.append(f"({template}.matches({quote(pattern)}) && {_label_is('dedicated')})")
        return kinds

    def shim_limits(self) -> list[Rule]:
        """Time-sliced pods carry the shim limits (and a matching request) within the profile."""
        ts = self.gpu.time_slice
        if ts is None or self.spec.runtime.shim != "enforce":
            return []
        memory = int_range_regex(1, ts.max_memory)
        compute = int_range_regex(1, ts.max_compute)
        scrub = "1" if self.spec.runtime.scrub_on_free else "[01]"
        # The compiler writes `firewall=1` or no line (the shim's default is off): an enforcing
        # profile accepts only the line, an `off` one also its absence, never `firewall=0`.
        firewall = "firewall=1\\n" if self.profile.cuda_firewall() else "(firewall=1\\n)?"
        limits_re = (
            f"^version=1\\nmemory={memory}\\ncompute={compute}\\nscrub_on_free={scrub}\\n"
            f"{firewall}$"
        )
        # The request is JSON, which CEL cannot parse: it must be exactly the compact form the
        # compiler writes (TimeSlice.to_json), with the bounds as number patterns. One fixed
        # shape leaves no room for a repeated or nested member that a JSON reader would prefer.
        request_re = wire_pattern("timeslice", memory=memory, compute=compute)
        time_sliced = _label_is(ISOLATION_TIMESLICE_SHIM)
        if self.gpu.backend == "device-plugin":
            shared = quote(ts.resource_name)
            time_sliced = f"({time_sliced} || {_any_container_requests(f'k == {shared}')})"
        limits_ok = (
            f"{_has_annotation(contract.ANNOTATION_LIMITS)} && "
            f"{_annotation(contract.ANNOTATION_LIMITS)}.matches({quote(limits_re)})"
        )
        request_ok = (
            f"{_has_annotation(contract.ANNOTATION_GPU_REQUEST)} && "
            f"{_annotation(contract.ANNOTATION_GPU_REQUEST)}.matches({quote(request_re)})"
        )
        bounds = f"memory <= {ts.max_memory} bytes, compute <= {ts.max_compute}%"
        firewall_text = "firewall=1" if self.profile.cuda_firewall() else "firewall=1 or none"
        return [
            self.rule(
                "secureml.shimLimits",
                f"a time-sliced pod must carry the shim limits annotation {contract.ANNOTATION_LIMITS} "
                f"({bounds}, scrub_on_free={'1' if self.spec.runtime.scrub_on_free else '0|1'}, "
                f"{firewall_text})",
                f"!{time_sliced} || ({limits_ok})",
                f"!{_has_annotation(contract.ANNOTATION_LIMITS)} ? "
                f"{quote('time-sliced pod has no ' + contract.ANNOTATION_LIMITS + ' annotation')} : "
                f"{quote('annotation ' + contract.ANNOTATION_LIMITS + ' is malformed or exceeds ' + bounds)}",
            ),
            self.rule(
                "secureml.gpuRequest",
                f"a time-sliced pod must carry {contract.ANNOTATION_GPU_REQUEST} "
                f'exactly {{"kind":"timeslice","memory":<bytes>,"compute":<percent>}} within the profile '
                f"({bounds})",
                f"!{time_sliced} || ({request_ok})",
                f"!{_has_annotation(contract.ANNOTATION_GPU_REQUEST)} ? "
                f"{quote('time-sliced pod has no ' + contract.ANNOTATION_GPU_REQUEST + ' annotation')} : "
                f"{quote('annotation ' + contract.ANNOTATION_GPU_REQUEST + ' is not a time-slice request within ' + bounds)}",
            ),
        ]

    # --- containers ------------------------------------------------------------------------------
    def hardening(self) -> list[Rule]:
        rules: list[Rule] = []
        if self.spec.hardening.read_only_root_filesystem:
            rules.append(
                self.container_rule(
                    "secureml.readOnlyRootFilesystem",
                    "must set securityContext.readOnlyRootFilesystem=true",
                    f"({has_path('c', 'securityContext', 'readOnlyRootFilesystem')} && "
                    "c.securityContext.readOnlyRootFilesystem == true)",
                )
            )
        rules.append(
            self.rule(
                "secureml.linuxOnly",
                "pod must be a Linux pod (spec.os.name unset or linux): the launcher and the shim are "
                "Linux-only, and Pod Security exempts Windows pods from its Linux checks",
                f"!{has_path(SPEC, 'os', 'name')} || {SPEC}.os.name == 'linux'",
                f"'pod must not set spec.os.name=' + {SPEC}.os.name",
                EVERY_POD,
            )
        )
        pod_sc = f"{SPEC}.securityContext"
        pod_non_root = (
            f"{has_path(SPEC, 'securityContext', 'runAsNonRoot')} && {pod_sc}.runAsNonRoot == true"
        )
        pod_root_uid = (
            f"({has_path(SPEC, 'securityContext', 'runAsUser')} && {pod_sc}.runAsUser == 0)"
        )
        not_uid_0 = f"!({has_path('c', 'securityContext', 'runAsUser')} && c.securityContext.runAsUser == 0)"
        container_set = has_path("c", "securityContext", "runAsNonRoot")
        if_pod_sets = (
            f"((!{container_set} || c.securityContext.runAsNonRoot == true) && {not_uid_0})"
        )
        otherwise = f"({container_set} && c.securityContext.runAsNonRoot == true && {not_uid_0})"
        containers, message_shape = inherited_setting(pod_non_root, if_pod_sets, otherwise)
        tail = "must run as non-root (runAsNonRoot=true, runAsUser not 0)"
        pod_message = "pod must not set securityContext.runAsUser=0"
        rules.append(
            self.rule(
                "secureml.runAsNonRoot",
                "must run as non-root (runAsNonRoot=true, runAsUser not 0), user namespace or not",
                f"!{pod_root_uid} && {containers}",
                message_shape
                % (
                    container_rule_message(if_pod_sets, tail, pod_message),
                    container_rule_message(otherwise, tail, pod_message),
                ),
                EVERY_POD,
            )
        )
        return rules

    def images(self) -> list[Rule]:
        images = self.spec.images
        prefixes = [p if p.endswith("/") else p + "/" for p in images.allowed_registries]
        system = contract.KFP_SYSTEM_IMAGES
        # KFP's and Argo's own containers, by name, image repository (any tag or digest) and
        # command: the same test that makes a pod a KFP system pod (secureml.rules.scope). The
        # platform team pins them by digest in KFP's and Argo's configuration; the image policy
        # admits them without a tenant signature.
        # The platform's runtime init container: exactly the profile's runtime image
        # (secureml.rules.runtime; its shape is secureml.tenantContainers').
        system_ok = f"({system_container()} || {runtime_image_container(self.profile)})"
        tenant_ok = " || ".join(f"c.image.startsWith({quote(p)})" for p in prefixes) or "false"
        rules = [
            self.container_rule(
                "secureml.imageRegistry",
                f"must use an image from {', '.join(prefixes)} (or KFP's own {', '.join(system)})",
                f"(has(c.image) && ({tenant_ok} || {system_ok}))",
                EVERY_POD,
            )
        ]
        if images.require_digest:
            rules.append(
                self.container_rule(
                    "secureml.imageDigest",
                    "must pin its image by digest (IMAGE@sha256:<64 hex>)",
                    # KFP's own images first: their string tests are cheaper than the pattern.
                    f"(has(c.image) && ({system_ok} || c.image.matches('@sha256:[0-9a-f]{{64}}$')))",
                    EVERY_POD,
                )
            )
        return rules

    def environment(self) -> list[Rule]:
        forbidden = string_list(contract.FORBIDDEN_ENV)
        env_ok = f"(!has(c.env) || c.env.all(e, !(e.name in {forbidden})))"
        # KFP's own import into `main` (contract.KFP_METADATA_CONFIGMAP, keys guarded by the bundle),
        # exactly: no prefix, no Secret, that ConfigMap.
        kfp_import = (
            f"(c.name == {quote(contract.KFP_MAIN_CONTAINER)} && !has(s.prefix) && "
            "!has(s.secretRef) && has(s.configMapRef) && "
            f"s.configMapRef.name == {quote(contract.KFP_METADATA_CONFIGMAP)})"
        )
        env_from_ok = (
            "(!has(c.envFrom) || c.envFrom.all(s, (has(s.prefix) && s.prefix != '' && "
            f"!{forbidden}.exists(f, f.startsWith(s.prefix))) || {kfp_import}))"
        )
        # The message names the container and the variable it sets.
        sets = " + ".join(
            f"(has({SPEC}.{lst}) ? {SPEC}.{lst}.filter(c, !{env_ok}).map(c, 'container \"' + c.name + "
            f"'\" sets ' + c.env.filter(e, e.name in {forbidden})[0].name) : [])"
            for lst in CONTAINER_LISTS
        )
        message = (
            "must not set "
            f"{', '.join(contract.FORBIDDEN_ENV)} (they switch controls off or replace the shim preload)"
        )
        return [
            self.rule(
                "secureml.forbiddenEnv",
                message,
                every_container(env_ok),
                f"({sets})[0] + ': no container may set it (it switches a control off or replaces the "
                "shim preload)'",
                EVERY_POD,
            ),
            self.container_rule(
                "secureml.envFrom",
                "must not import environment from a ConfigMap or Secret without a prefix that "
                "keeps it clear of the forbidden variables",
                env_from_ok,
                EVERY_POD,
            ),
        ]

    def all(self) -> list[Rule]:
        return [
            *self.labels(),
            *self.isolation(),
            *self.gpu_matches_label(),
            *self.gpu_resources(),
            *self.claims(),
            *self.shim_limits(),
            *self.hardening(),
            *self.images(),
            *self.environment(),
        ]


def profile_rules(profile: TenantProfile) -> list[Rule]:
    """secureml's rules for `profile` (without the Pod Security Standards)."""
    from secureml.rules.accounts import account_rules
    from secureml.rules.confidential import confidential_rules
    from secureml.rules.gpu_request import gpu_request_rules
    from secureml.rules.handlers import debug_pause_rules, handler_rules, restart_rules
    from secureml.rules.identity import pipeline_identity_rules
    from secureml.rules.immutable import immutable_rules
    from secureml.rules.launcher import launcher_rules
    from secureml.rules.loader_env import loader_env_rules
    from secureml.rules.modelcar import modelcar_rules
    from secureml.rules.mounts import mount_rules
    from secureml.rules.placement import placement_rules
    from secureml.rules.pod_fields import pod_field_rules
    from secureml.rules.resources import resource_rules
    from secureml.rules.runtime_class import runtime_class_rules
    from secureml.rules.system_shape import system_container_rules
    from secureml.rules.trainer_node import trainer_node_rules
    from secureml.rules.volumes import volume_rules

    return [
        *_Catalogue(profile).all(),
        *resource_rules(profile),
        *placement_rules(profile),
        *confidential_rules(profile),
        *runtime_class_rules(profile),
        *volume_rules(profile),
        *launcher_rules(profile),
        *gpu_request_rules(profile),  # after tenantContainers: a stray container is named so
        *system_container_rules(profile),
        *pod_field_rules(profile),
        *loader_env_rules(profile),
        *mount_rules(profile),
        *modelcar_rules(profile),
        *handler_rules(profile),
        *debug_pause_rules(profile),
        *restart_rules(profile),
        *account_rules(profile),
        *trainer_node_rules(profile),
        *immutable_rules(profile),
        *pipeline_identity_rules(profile),
    ]
