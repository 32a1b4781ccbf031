"""Every step container runs under the launcher, configured by the platform."""

from __future__ import annotations

from secureml.core import contract
from secureml.pods.preview import KFP_LAUNCHER_FLAGS
from secureml.profile.model import TenantProfile
from secureml.profile.runtime_image import injected, launcher_prefix
from secureml.profile.spiffe import spiffe_id_template
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, name_first
from secureml.rules.cel.text import label_is, quote, string_list
from secureml.rules.model import Rule
from secureml.rules.runtime import runtime_container, runtime_rules
from secureml.rules.scope import (
    ARGO_LOG_FLAGS_SIZE,
    argo_log_flags,
    native_resources_only,
    system_container,
    system_image,
)
from secureml.supplychain.model_trust import profile_trust_json

# Flags KFP's driver may repeat (`--publish_logs` is there twice): room for each one twice.
MAX_LAUNCHER_FLAGS = 2 * len(KFP_LAUNCHER_FLAGS)
# Argo's emissary in front of `main`'s command: `/var/run/argo/argoexec emissary LOG --`.
EMISSARY_SIZE = 2 + ARGO_LOG_FLAGS_SIZE + 1

# Python variables that only shape output or hashing: they load nothing.
HARMLESS_PYTHON_ENV = (
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONHASHSEED",
    "PYTHONFAULTHANDLER",
)
INTERPRETER_ENV = ("PATH", "HOME")
PYTHON_ENV_PREFIX = "PYTHON"

_LABELS = "labels"  # bound once per rule: the pod's labels (empty map when none)
_ANNOTATIONS = "annotations"


def _bind_metadata(expression: str, *, message: bool = False) -> str:
    """`expression` with the pod's labels and annotations read once, as `labels`/`annotations`."""
    labels = "(has(object.metadata.labels) ? object.metadata.labels : {})"
    annotations = "(has(object.metadata.annotations) ? object.metadata.annotations : {})"
    if message:
        return f"[{labels}].map({_LABELS}, [{annotations}].map({_ANNOTATIONS}, {expression})[0])[0]"
    return f"[{labels}].all({_LABELS}, [{annotations}].all({_ANNOTATIONS}, {expression}))"


def _label(key: str) -> str:
    return f"({quote(key)} in {_LABELS} ? {_LABELS}[{quote(key)}] : '')"


def _annotation_is(key: str, value: str) -> str:
    return f"({quote(key)} in {_ANNOTATIONS} && {value} == {_ANNOTATIONS}[{quote(key)}])"


def _argv(var: str = "c") -> str:
    return f"((has({var}.command) ? {var}.command : []) + (has({var}.args) ? {var}.args : []))"


def _launcher_after(offset: int, launcher: tuple[str, ...]) -> str:
    """CEL over argv `a`: from `offset`, KFP's launcher, its flags, `--`, then ours (`launcher`)
    and a step.

    `t` runs over the positions KFP's terminator can take (after 0..MAX_LAUNCHER_FLAGS flag/value
    pairs); every flag position before it must hold one of KFP's value flags.
    """
    flags = string_list(KFP_LAUNCHER_FLAGS)
    positions = (
        "[" + ", ".join(str(offset + 1 + 2 * k) for k in range(MAX_LAUNCHER_FLAGS + 1)) + "]"
    )
    prefix = " && ".join(f"a[t + {1 + i}] == {quote(part)}" for i, part in enumerate(launcher))
    step_at = 1 + len(launcher)
    return (
        f"(size(a) > {offset} && a[{offset}] == {quote(contract.KFP_LAUNCHER_BINARY)} && "
        f"{positions}.exists(t, size(a) > t + {step_at} && a[t] == '--' && "
        f"{positions}.all(j, j >= t || a[j] in {flags}) && {prefix}))"
    )


def _emissary() -> str:
    """CEL over argv `a`: it starts with Argo's emissary wrapper, exactly."""
    return (
        f"(size(a) > {EMISSARY_SIZE} && a[0] == {quote(contract.ARGO_EXECUTOR_BINARY)} && "
        f"a[1] == 'emissary' && {argo_log_flags('a', 2)} && a[{EMISSARY_SIZE - 1}] == '--')"
    )


def launcher_argv_ok(var: str = "c", launcher: tuple[str, ...] = contract.LAUNCHER_PREFIX) -> str:
    """CEL: container `var`'s argv runs KFP's launcher, then ours (`launcher`: the in-image one or
    the injected one, `runtime_image.launcher_prefix`), behind Argo's emissary or not (the shape
    KFP's driver writes, and the one Argo runs)."""
    bare = _launcher_after(0, launcher)
    wrapped = f"({_emissary()} && {_launcher_after(EMISSARY_SIZE, launcher)})"
    return f"[{_argv(var)}].all(a, {bare} || {wrapped})"


# A trainer node pod (docs/trainer.md): Trainer and JobSet create it from the step's TrainJob, so
# its one tenant container is the runtime's `node` and its argv the launcher, without KFP's.
TRAINER_NODE_POD = label_is(contract.LABEL_TRAINER_NODE, "true")


def node_argv_ok(var: str = "c", launcher: tuple[str, ...] = contract.LAUNCHER_PREFIX) -> str:
    """CEL: a trainer node's argv is exactly `launcher` and then a command."""
    prefix = " && ".join(f"a[{i}] == {quote(part)}" for i, part in enumerate(launcher))
    return f"[{_argv(var)}].all(a, size(a) > {len(launcher)} && {prefix})"


def _system_ok(var: str = "c") -> str:
    """A KFP/Argo container of a step pod: exactly its own shape, and no device resource."""
    return f"({system_container(var)} && {native_resources_only(var)})"


def _containers_ok(var: str = "c") -> str:
    """A container of `containers`: KFP's/Argo's in its own shape, or the launcher's `main`."""
    main = quote(contract.KFP_MAIN_CONTAINER)
    node = quote(contract.TRAINER_NODE_CONTAINER)
    name = f"({TRAINER_NODE_POD} ? {node} : {main})"
    return f"({_system_ok(var)} || (!{system_image(var)} && {var}.name == {name}))"


def _tenant_containers(profile: TenantProfile) -> Rule:
    # Init containers: KFP's and Argo's, and the platform's runtime init container in exactly its
    # shape (none where the profile injects no runtime); ephemeral containers: KFP's and Argo's.
    others = {
        "initContainers": f"({_system_ok()} || {runtime_container(profile)})",
        "ephemeralContainers": _system_ok(),
    }
    expression = f"{SPEC}.containers.all(c, {_containers_ok()})" + "".join(
        f" && (!has({SPEC}.{lst}) || {SPEC}.{lst}.all(c, {ok}))" for lst, ok in others.items()
    )
    offenders = (
        f"({SPEC}.containers.filter(c, !{_containers_ok()}).map(c, c.name)"
        + "".join(
            f" + (has({SPEC}.{lst}) ? {SPEC}.{lst}.filter(c, !{ok}).map(c, c.name) : [])"
            for lst, ok in others.items()
        )
        + ")"
    )
    runtime = (
        f", and the platform's {contract.RUNTIME_INIT_CONTAINER} exactly as injected"
        if injected(profile)
        else ""
    )
    tail = (
        "is neither the step's main container (a trainer node's: node) nor one of KFP's/Argo's "
        "own in its own shape "
        f"(init and ephemeral containers: KFP's and Argo's images only{runtime}, no device "
        "resources)"
    )
    return tenant_rule(
        profile,
        "secureml.tenantContainers",
        "a step pod runs only `main` and KFP's and Argo's own containers in their own shape "
        "(no tenant init, sidecar, ephemeral or extra container; no device resource on a system "
        "container)",
        expression,
        name_first(offenders, "container", tail, quote(f"a container {tail}")),
    )


def _launcher_argv(profile: TenantProfile) -> Rule:
    launcher = launcher_prefix(profile)
    argv_ok = (
        f"({TRAINER_NODE_POD} ? {node_argv_ok(launcher=launcher)} : "
        f"{launcher_argv_ok(launcher=launcher)})"
    )
    predicate = f"({system_image()} || {argv_ok})"
    wrappers = f"{contract.ARGO_EXECUTOR_BINARY} emissary <Argo's log flags> --"
    tail = (
        f"must run {wrappers} (optional), {contract.KFP_LAUNCHER_BINARY} <its flags> --, then exactly "
        f"{' '.join(launcher)} <step command> (a trainer node: {' '.join(launcher)} <command>)"
    )
    offenders = f"{SPEC}.containers.filter(c, !{predicate}).map(c, c.name)"
    return tenant_rule(
        profile,
        "secureml.launcherArgv",
        f"the step's container {tail}",
        f"{SPEC}.containers.all(c, {predicate})",
        name_first(offenders, "container", tail, quote(f"a container {tail}")),
    )


def _flag(value: bool) -> str:
    return quote("true" if value else "false")


def _spiffe_id_cel(profile: TenantProfile) -> str:
    """The SPIFFE ID SPIRE issues to the pod (the ClusterSPIFFEID's template over its labels)."""
    template = spiffe_id_template(profile)
    pieces: list[str] = []
    for key in (contract.LABEL_PIPELINE, contract.LABEL_STEP):
        template = template.replace(f'{{{{ index .PodMeta.Labels "{key}" }}}}', f"\x00{key}\x00")
    for index, piece in enumerate(template.split("\x00")):
        if index % 2:
            pieces.append(_label(piece))
        elif piece:
            pieces.append(quote(piece))
    return "(" + " + ".join(pieces) + ")"


def pinned_env(profile: TenantProfile) -> dict[str, str]:
    """Each variable the compiler writes for the launcher -> CEL over `e.value` that holds for the
    value admission allows (`c` the container, `labels`/`annotations` the pod's)."""
    spec = profile.spec
    isolation = _label(contract.LABEL_ISOLATION)
    gpu = f"{isolation} != {quote(contract.ISOLATION_NONE)}"
    trust = profile_trust_json(profile)
    pinned = {
        contract.ENV_TENANT: f"e.value == {quote(profile.metadata.name)}",
        contract.ENV_NAMESPACE: f"e.value == {quote(spec.namespace)}",
        contract.ENV_PIPELINE: "true",  # the audit record's name of the pipeline, no control
        contract.ENV_STEP: f"e.value == {_label(contract.LABEL_STEP)}",
        contract.ENV_ISOLATION: f"e.value == {isolation}",
        contract.ENV_IMAGE: "has(c.image) && e.value == c.image",
        contract.ENV_IDENTITY_REQUIRED: f"e.value == {_flag(spec.identity.required)}",
        contract.ENV_EXPECTED_SPIFFE_ID: f"e.value == {_spiffe_id_cel(profile)}",
        contract.ENV_SCRUB_BEFORE: f"e.value == ({gpu} ? {_flag(spec.scrub.before)} : 'false')",
        contract.ENV_SCRUB_AFTER: f"e.value == ({gpu} ? {_flag(spec.scrub.after)} : 'false')",
        contract.ENV_SCRUB_VERIFY: f"e.value == ({gpu} ? {quote(spec.scrub.verify)} : 'off')",
        contract.ENV_SHIM_MODE: f"e.value == ({isolation} == 'timeslice-shim' ? 'enforce' : 'off')",
        contract.ENV_GPU_REQUEST: _annotation_is(contract.ANNOTATION_GPU_REQUEST, "e.value"),
        contract.ENV_CONFIDENTIAL_COMPUTING: _annotation_is(
            contract.ANNOTATION_CONFIDENTIAL_COMPUTING, "e.value"
        ),
        contract.ENV_SHIM_LIMITS_FILE: f"e.value == {quote(contract.SHIM_LIMITS_PATH)}",
        contract.SPIFFE_SOCKET_ENV: f"e.value == {quote('unix://' + spec.identity.socket_path)}",
        # Signed inputs: which ones is the step's (its annotation); whom to trust the profile's.
        contract.ENV_VERIFY_INPUTS: _annotation_is(contract.ANNOTATION_VERIFY_INPUTS, "e.value"),
        contract.ENV_MODEL_TRUST: f"e.value == {quote(trust)}" if trust else "false",
    }
    return pinned


def required_env(profile: TenantProfile) -> tuple[str, ...]:
    """The variables whose absence would make the launcher fall back to a weaker default."""
    names = [
        contract.ENV_ISOLATION,
        contract.ENV_IDENTITY_REQUIRED,
        contract.ENV_SCRUB_BEFORE,
        contract.ENV_SCRUB_AFTER,
        contract.ENV_SCRUB_VERIFY,
        contract.ENV_SHIM_MODE,
    ]
    if profile.spec.identity.required:
        names += [contract.ENV_EXPECTED_SPIFFE_ID, contract.SPIFFE_SOCKET_ENV]
    return tuple(names)


def _prefix_ok(families: tuple[str, ...], names: tuple[str, ...]) -> str:
    """CEL over `s`: an envFrom whose prefix can form no name of `families` (prefixes) or `names`,
    or KFP's own import of its metadata ConfigMap into `main` (its keys are guarded by the bundle;
    the same exception as `secureml.envFrom`)."""
    checks = [
        f"!{quote(f)}.startsWith(s.prefix) && !s.prefix.startsWith({quote(f)})" for f in families
    ]
    checks += [f"!{quote(n)}.startsWith(s.prefix)" for n in names]
    kfp_import = (
        f"(c.name == {quote(contract.KFP_MAIN_CONTAINER)} && !has(s.prefix) && "
        "!has(s.secretRef) && has(s.configMapRef) && "
        f"s.configMapRef.name == {quote(contract.KFP_METADATA_CONFIGMAP)})"
    )
    return (
        f"(!has(c.envFrom) || c.envFrom.all(s, (has(s.prefix) && {' && '.join(checks)}) || "
        f"{kfp_import}))"
    )


def _launcher_env(profile: TenantProfile) -> Rule:
    pinned = pinned_env(profile)
    names = string_list(pinned)
    # One disjunct per pinned name rather than a chain of ternaries: for a pinned name exactly one
    # `e.name == N` holds, and `false && x` is false even where x errs, so it is the same
    # predicate; it also stays within the C++ CEL parser's nesting limit (32 levels), which the
    # 16-deep chain passed (the offline fast path, secureml.rules.cel.cpp).
    chain = " || ".join(f"(e.name == {quote(n)} && ({c}))" for n, c in pinned.items())
    entry_ok = (
        f"(e.name in {names} ? (has(e.value) && !has(e.valueFrom) && ({chain})) : "
        f"!e.name.startsWith({quote(contract.ENV_PREFIX)}))"
    )
    required = string_list(required_env(profile))
    env_ok = (
        f"(!has(c.env) || c.env.all(e, {entry_ok})) && "
        f"{required}.all(n, has(c.env) && c.env.exists(e, e.name == n)) && "
        f"{_prefix_ok((contract.ENV_PREFIX,), (contract.SPIFFE_SOCKET_ENV,))}"
    )
    predicate = f"({system_image()} || ({env_ok}))"
    tail = (
        f"must set {', '.join(required_env(profile))} and any other SECUREML_* or "
        f"{contract.SPIFFE_SOCKET_ENV} only as plain values equal to what the profile and the "
        "pod's labels require (and no envFrom prefix that can form them)"
    )
    offenders = f"{SPEC}.containers.filter(c, !{predicate}).map(c, c.name)"
    return tenant_rule(
        profile,
        "secureml.launcherEnv",
        f"the step's container {tail}",
        _bind_metadata(f"{SPEC}.containers.all(c, {predicate})"),
        _bind_metadata(
            name_first(offenders, "container", tail, quote(f"a container {tail}")), message=True
        ),
    )


def _interpreter_env(profile: TenantProfile) -> Rule:
    harmless = string_list(HARMLESS_PYTHON_ENV)
    forbidden = string_list(INTERPRETER_ENV)
    env_ok = (
        f"(!has(c.env) || c.env.all(e, !(e.name in {forbidden}) && "
        f"(!e.name.startsWith({quote(PYTHON_ENV_PREFIX)}) || e.name in {harmless}))) && "
        f"{_prefix_ok((PYTHON_ENV_PREFIX,), INTERPRETER_ENV)} && !has(c.workingDir)"
    )
    predicate = f"({system_image()} || ({env_ok}))"
    tail = (
        f"must not set {', '.join(INTERPRETER_ENV)}, PYTHON* (but "
        f"{', '.join(HARMLESS_PYTHON_ENV)}) or workingDir: they choose the interpreter and what "
        "it imports before the launcher runs"
    )
    offenders = f"{SPEC}.containers.filter(c, !{predicate}).map(c, c.name)"
    return tenant_rule(
        profile,
        "secureml.interpreterEnv",
        f"the step's container {tail}",
        f"{SPEC}.containers.all(c, {predicate})",
        name_first(offenders, "container", tail, quote(f"a container {tail}")),
    )


def launcher_rules(profile: TenantProfile) -> list[Rule]:
    """The class 1 rules of `profile` and, where it injects the runtime, class 9's (step pods
    only)."""
    return [
        _tenant_containers(profile),
        _launcher_argv(profile),
        *runtime_rules(profile),
        _launcher_env(profile),
        _interpreter_env(profile),
    ]
