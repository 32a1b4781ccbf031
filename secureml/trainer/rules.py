"""Admission rules on a tenant's TrainJobs and on the NetworkPolicies its trainer steps create."""

from __future__ import annotations

from dataclasses import dataclass

from secureml.core import contract
from secureml.core.contract import RUNNER_NAME
from secureml.nvidia.catalogue import LABEL_GPU_PRODUCT, RESOURCE_GPU
from secureml.profile.model import TenantProfile
from secureml.profile.runtime_image import launcher_prefix
from secureml.rules.cel.text import quote, string_list
from secureml.rules.imagerefs import pinned, tenant_registry
from secureml.trainer.manifest import RUNTIME_KIND

TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
# Every volume source of the Pod API (the TrainJob CRD's patch schema has exactly these): a patch
# may add emptyDir volumes only.
VOLUME_SOURCES = (
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "persistentVolumeClaim",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "rbd",
    "scaleIO",
    "secret",
    "storageos",
    "vsphereVolume",
)
NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage", RESOURCE_GPU)

_SPEC = "object.spec"
_TRAINER = f"{_SPEC}.trainer"
_PATCHES = f"{_SPEC}.runtimePatches"


@dataclass(frozen=True)
class Validation:
    """One rule: a stable id, the message of a refusal, CEL true when the object is allowed."""

    id: str
    message: str
    expression: str


def _opt(path: str) -> str:
    """`has()` of every step of a field path after its root: `a.b.c` -> `has(a.b) && has(a.b.c)`."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join(parts[: i + 1])})" for i in range(1, len(parts)))


def _all(path: str, var: str, predicate: str) -> str:
    """CEL: the optional list at `path` is absent or every item holds."""
    return f"(!({_opt(path)}) || {path}.all({var}, {predicate}))"


def _not_set(path: str) -> str:
    return f"!({_opt(path)})"


def _pod_templates(predicate: str) -> str:
    """CEL: `predicate` over `t` holds for the pod template of every replicated job patch."""
    jobs = "p.trainingRuntimeSpec.template.spec.replicatedJobs"
    template = "j.template.spec.template"
    per_job = f"(!({_opt(template)}) || [{template}].all(t, {predicate}))"
    return f"(!has({_SPEC}.runtimePatches) || {_PATCHES}.all(p, {_all(jobs, 'j', per_job)}))"


def _is_ours(profile: TenantProfile) -> str:
    """The one patch is the compiler's, on replicated job `node`, labelled as the tenant's node."""
    jobs = "p.trainingRuntimeSpec.template.spec.replicatedJobs"
    labels = "j.template.spec.template.metadata.labels"
    tenant = quote(contract.LABEL_TENANT)
    node = quote(contract.LABEL_TRAINER_NODE)
    labelled = (
        f"{_opt(labels)} && {tenant} in {labels} && "
        f"{labels}[{tenant}] == {quote(contract.label_value(profile.metadata.name))} && "
        f"{node} in {labels} && {labels}[{node}] == 'true'"
    )
    return (
        f"has({_PATCHES}) && size({_PATCHES}) == 1 && {_PATCHES}.all(p, "
        f"p.manager == {quote(contract.TRAINER_PATCH_MANAGER)} && {_opt(jobs)} && "
        f"{jobs}.all(j, j.name == {quote(contract.TRAINER_REPLICATED_JOB)}) && "
        f"{jobs}.exists(j, {labelled}))"
    )


def _not_root(sc: str) -> str:
    """CEL over a security context `sc` (pod or container): nothing that runs as root or
    unconfined."""
    return (
        f"(!has({sc}.runAsNonRoot) || {sc}.runAsNonRoot) && "
        f"(!has({sc}.runAsUser) || {sc}.runAsUser != 0) && "
        f"(!has({sc}.runAsGroup) || {sc}.runAsGroup != 0) && "
        f"!has({sc}.seLinuxOptions) && "
        f"(!has({sc}.seccompProfile) || {sc}.seccompProfile.type == 'RuntimeDefault' || "
        f"{sc}.seccompProfile.type == 'Localhost') && "
        f"(!has({sc}.appArmorProfile) || {sc}.appArmorProfile.type != 'Unconfined') && "
        f"(!has({sc}.windowsOptions) || !has({sc}.windowsOptions.hostProcess) || "
        f"!{sc}.windowsOptions.hostProcess)"
    )


def _pod_security(profile: TenantProfile) -> str:
    sc = "t.spec.securityContext"
    return (
        f"(!({_opt(sc)}) || ({_not_root(sc)} && "
        f"(!has({sc}.fsGroup) || {sc}.fsGroup != 0) && "
        f"(!has({sc}.supplementalGroups) || !(0 in {sc}.supplementalGroups)) && "
        f"!has({sc}.sysctls)))"
    )


def _container_security(profile: TenantProfile) -> str:
    sc = "c.securityContext"
    read_only = (
        f" && has({sc}.readOnlyRootFilesystem) && {sc}.readOnlyRootFilesystem"
        if profile.spec.hardening.read_only_root_filesystem
        else ""
    )
    return (
        f"has({sc}) && {_not_root(sc)} && (!has({sc}.privileged) || !{sc}.privileged) && "
        f"has({sc}.allowPrivilegeEscalation) && !{sc}.allowPrivilegeEscalation && "
        f"has({sc}.capabilities) && has({sc}.capabilities.drop) && "
        f"'ALL' in {sc}.capabilities.drop && !has({sc}.capabilities.add) && "
        f"(!has({sc}.procMount) || {sc}.procMount == 'Default'){read_only}"
    )


def _env_ok(var: str, *, compiler_env: bool) -> str:
    """CEL: an env entry `var` names no variable that switches a control off, nor (outside the
    trainer's own env, where the compiler writes them and the pod rules pin them) one of the
    compiler's `SECUREML_*`."""
    forbidden = f"!({var}.name in {string_list(contract.FORBIDDEN_ENV)})"
    if compiler_env:
        return forbidden
    return f"{forbidden} && !{var}.name.startsWith({quote(contract.ENV_PREFIX)})"


def _platform_path_free(path: str) -> str:
    """CEL: mount path `path` is not at, above or below a platform path."""
    tests = [
        f"{path} == {quote(p)} || {path}.startsWith({quote(p.rstrip('/') + '/')}) || "
        f"{quote(p)}.startsWith({path}.endsWith('/') ? {path} : {path} + '/')"
        for p in contract.PLATFORM_PATHS
    ]
    return "!(" + " || ".join(f"({t})" for t in tests) + ")"


def _tolerated(profile: TenantProfile) -> str:
    """CEL over a toleration `x`: it is one of the profile's own (whole GPU pool)."""
    whole = profile.spec.gpu.whole_gpu
    tolerations = whole.tolerations if whole is not None else []
    options = []
    for t in tolerations:
        parts = [
            f"(has(x.key) ? x.key : '') == {quote(t.key or '')}",
            f"(has(x.operator) ? x.operator : 'Equal') == {quote(t.operator)}",
            f"(has(x.value) ? x.value : '') == {quote(t.value or '')}",
            f"(has(x.effect) ? x.effect : '') == {quote(t.effect or '')}",
            "!has(x.tolerationSeconds)",
        ]
        options.append("(" + " && ".join(parts) + ")")
    return "(" + (" || ".join(options) or "false") + ")"


def _node_selector_ok(profile: TenantProfile) -> str:
    """CEL over the pod template `t`: each node selector entry is the pool's own, or the GPU
    product (the pod rules check the product against the request)."""
    whole = profile.spec.gpu.whole_gpu
    pool = dict(whole.node_selector) if whole is not None else {}
    entries = [
        f"(k == {quote(key)} && t.spec.nodeSelector[k] == {quote(v)})"
        for key, v in sorted(pool.items())
    ]
    entries.append(f"k == {quote(LABEL_GPU_PRODUCT)}")
    return _all("t.spec.nodeSelector", "k", " || ".join(entries))


def _gpu_count_ok(profile: TenantProfile, field: str) -> str:
    """CEL: the GPU count at `field` (a quantity, int or string) is a whole number within the
    profile's per-node limit."""
    trainer = profile.spec.trainer
    limit = trainer.max_gpus_per_node if trainer is not None else 0
    value = f"string({field})"
    return f"({value}.matches('^[0-9]{{1,3}}$') && int({value}) <= {limit})"


def _resources_ok(profile: TenantProfile) -> str:
    res = f"{_TRAINER}.resourcesPerNode"
    gpu = quote(RESOURCE_GPU)
    parts = [f"!has({res}.claims)"]
    for kind in ("limits", "requests"):
        m = f"{res}.{kind}"
        parts.append(
            f"(!has({m}) || ({m}.all(k, k in {string_list(NODE_RESOURCES)}) && "
            f"(!({gpu} in {m}) || {_gpu_count_ok(profile, f'{m}[{gpu}]')})))"
        )
    return f"(!({_opt(res)}) || ({' && '.join(parts)}))"


def trainjob_validations(profile: TenantProfile) -> list[Validation]:
    """The rules every TrainJob of the tenant must pass (ids `secureml.trainjob.*`)."""
    trainer = profile.spec.trainer
    allowed = list(trainer.allowed_runtimes) if trainer is not None else []
    max_nodes = trainer.max_nodes if trainer is not None else 0
    launcher = launcher_prefix(profile)
    image = f"{_TRAINER}.image"
    image_ok = f"has({_TRAINER}) && has({image}) && {tenant_registry(image, profile)}"
    if profile.spec.images.require_digest:
        image_ok += f" && {pinned(image)}"
    command = f"{_TRAINER}.command"
    argv = " && ".join(f"{command}[{i}] == {quote(part)}" for i, part in enumerate(launcher))
    volumes = "t.spec.volumes"
    other_sources = " && ".join(f"!has(v.{s})" for s in VOLUME_SOURCES if s != "emptyDir")
    return [
        Validation(
            "secureml.trainjob.runtime",
            f"runtimeRef must name a {RUNTIME_KIND} the profile allows "
            f"({', '.join(allowed) or 'none'}); namespaced TrainingRuntimes are not allowed",
            f"has({_SPEC}.runtimeRef) && {_SPEC}.runtimeRef.name in {string_list(allowed)} && "
            f"(!has({_SPEC}.runtimeRef.kind) || {_SPEC}.runtimeRef.kind == {quote(RUNTIME_KIND)}) && "
            f"(!has({_SPEC}.runtimeRef.apiGroup) || "
            f"{_SPEC}.runtimeRef.apiGroup == {quote(contract.TRAINER_GROUP)})",
        ),
        Validation(
            "secureml.trainjob.controller",
            f"no initializer (its containers run images outside the trainer's) and managedBy "
            f"only {TRAINJOB_CONTROLLER} (MultiKueue would run the job in a cluster this policy "
            "does not guard)",
            f"!has({_SPEC}.initializer) && "
            f"(!has({_SPEC}.managedBy) || {_SPEC}.managedBy == {quote(TRAINJOB_CONTROLLER)})",
        ),
        Validation(
            "secureml.trainjob.image",
            "spec.trainer.image must be under an allowed registry"
            + (", pinned by @sha256 digest" if profile.spec.images.require_digest else ""),
            image_ok,
        ),
        Validation(
            "secureml.trainjob.launcher",
            f"spec.trainer.command must be {' '.join(launcher)} and then the step's command",
            f"has({_TRAINER}) && has({command}) && size({command}) > {len(launcher)} && {argv}",
        ),
        Validation(
            "secureml.trainjob.nodes",
            f"spec.trainer.numNodes must be set, from 1 to {max_nodes} (spec.trainer.maxNodes)",
            f"has({_TRAINER}) && has({_TRAINER}.numNodes) && {_TRAINER}.numNodes >= 1 && "
            f"{_TRAINER}.numNodes <= {max_nodes}",
        ),
        Validation(
            "secureml.trainjob.resources",
            "resourcesPerNode asks only for cpu, memory, ephemeral-storage and at most "
            "spec.trainer.maxGpusPerNode whole GPUs, and no resource claims",
            _resources_ok(profile),
        ),
        Validation(
            "secureml.trainjob.env",
            "no variable that switches a control off (LD_PRELOAD, NVIDIA_VISIBLE_DEVICES, ...), "
            "and no SECUREML_* in the patch (the trainer's are the compiler's, pinned on the pods)",
            _all(f"{_TRAINER}.env", "e", _env_ok("e", compiler_env=True))
            + " && "
            + _pod_templates(
                _all("t.spec.containers", "c", _all("c.env", "e", _env_ok("e", compiler_env=False)))
            ),
        ),
        Validation(
            "secureml.trainjob.patch",
            f"exactly one runtime patch, manager {contract.TRAINER_PATCH_MANAGER}, on replicated "
            f"job {contract.TRAINER_REPLICATED_JOB}, its pod labelled as the tenant's trainer node",
            _is_ours(profile),
        ),
        Validation(
            "secureml.trainjob.serviceAccount",
            f"the node pods run as the runner {RUNNER_NAME} (serviceAccountName)",
            _pod_templates(
                f"!({_opt('t.spec.serviceAccountName')}) || t.spec.serviceAccountName == "
                f"{quote(RUNNER_NAME)}"
            ),
        ),
        Validation(
            "secureml.trainjob.securityContext",
            "the patch's pod and container security contexts keep the hardening: non-root, no "
            "group 0, no sysctls or SELinux options, seccomp RuntimeDefault/Localhost; each "
            "container drops ALL, adds nothing, no privilege escalation, not privileged"
            + (", read-only root" if profile.spec.hardening.read_only_root_filesystem else ""),
            _pod_templates(
                f"{_pod_security(profile)} && "
                + _all("t.spec.containers", "c", _container_security(profile))
            ),
        ),
        Validation(
            "secureml.trainjob.containers",
            f"the patch changes only container {contract.TRAINER_NODE_CONTAINER}, adds no init "
            "containers and no image pull secrets",
            _pod_templates(
                f"{_not_set('t.spec.initContainers')} && {_not_set('t.spec.imagePullSecrets')} && "
                + _all(
                    "t.spec.containers", "c", f"c.name == {quote(contract.TRAINER_NODE_CONTAINER)}"
                )
            ),
        ),
        Validation(
            "secureml.trainjob.volumes",
            "the patch adds emptyDir volumes only (no hostPath, PVC, secret, CSI, ...), mounted "
            "clear of the platform's paths, without subPathExpr or mount propagation",
            _pod_templates(
                _all(volumes, "v", f"has(v.emptyDir) && {other_sources}")
                + " && "
                + _all(
                    "t.spec.containers",
                    "c",
                    _all(
                        "c.volumeMounts",
                        "m",
                        f"{_platform_path_free('m.mountPath')} && !has(m.subPathExpr) && "
                        "!has(m.mountPropagation)",
                    ),
                )
            ),
        ),
        Validation(
            "secureml.trainjob.placement",
            "the patch's node selector holds only the dedicated pool's labels and the GPU "
            "product, its tolerations only the pool's own, no pod (anti-)affinity to other pods",
            _pod_templates(
                f"{_node_selector_ok(profile)} && "
                + _all("t.spec.tolerations", "x", _tolerated(profile))
                + " && (!has(t.spec.affinity) || (!has(t.spec.affinity.podAffinity) && "
                "!has(t.spec.affinity.podAntiAffinity)))"
            ),
        ),
    ]


def network_policy_validations() -> list[Validation]:
    """The shape of a trainer job's NetworkPolicy (`secureml.trainer.submit.network_policy`)."""
    labels = "object.spec.podSelector.matchLabels"
    name = f"{labels}[{quote(contract.LABEL_JOBSET_NAME)}]"
    peer_ok = (
        "has(x.podSelector) && !has(x.namespaceSelector) && !has(x.ipBlock) && "
        f"has(x.podSelector.matchLabels) && x.podSelector.matchLabels == {labels} && "
        "!has(x.podSelector.matchExpressions)"
    )
    rule_ok = "(!has(r.ports) && has(r.{peers}) && size(r.{peers}) > 0 && r.{peers}.all(x, {ok}))"
    return [
        Validation(
            "secureml.trainjobNetworkPolicy",
            "the runner may create only a trainer job's own NetworkPolicy: pods of one JobSet "
            f"(matchLabels {{{contract.LABEL_JOBSET_NAME}: <job>}} only), to and from each other",
            f"has(object.spec.podSelector) && has({labels}) && size({labels}) == 1 && "
            f"{quote(contract.LABEL_JOBSET_NAME)} in {labels} && "
            "!has(object.spec.podSelector.matchExpressions) && "
            f"object.metadata.name == {quote('secureml-trainjob-')} + {name} && "
            "has(object.spec.policyTypes) && 'Ingress' in object.spec.policyTypes && "
            "'Egress' in object.spec.policyTypes && "
            "(!has(object.spec.ingress) || object.spec.ingress.all(r, "
            + rule_ok.format(peers="from", ok=peer_ok)
            + ")) && (!has(object.spec.egress) || object.spec.egress.all(r, "
            + rule_ok.format(peers="to", ok=peer_ok)
            + "))",
        )
    ]
