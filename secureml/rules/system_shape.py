"""KFP's and Argo's own containers equal their whole shape (`secureml.systemContainers`)."""

from __future__ import annotations

from secureml.core import contract
from secureml.pods.podspec import CONTAINER_LISTS
from secureml.pods.system_shapes import (
    MIRROR_DIR,
    NATIVE_RESOURCES,
    PULL_POLICIES,
    SHAPES,
    SYSTEM_NAMES,
    SYSTEM_VOLUMES,
    TERMINATION_MESSAGE_PATH,
    TERMINATION_MESSAGE_POLICIES,
    Env,
    Mount,
    Shape,
    argo_template_pattern,
)
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import quote, string_list
from secureml.rules.container_fields import (
    common_ok,
    refused_fields,
    resources_ok,
    security_context_ok,
)
from secureml.rules.model import Rule
from secureml.rules.mounts import mount_is, platform_mounts, platform_source
from secureml.rules.scope import EVERY_POD, system_container, system_image
from secureml.rules.token_mount import SERVICE_ACCOUNT_TOKEN_MOUNT


def _regex_literal(text: str) -> str:
    return text.replace(".", "\\.")


def _image_ok(shape: Shape, var: str = "c") -> str:
    """The image is the shape's repository at a supported version (tag, tag and digest) or by
    digest."""
    repo = _regex_literal(shape.repository)
    versions = "|".join(_regex_literal(v) for v in shape.versions)
    exact = " || ".join(
        f"{var}.image == {quote(f'{shape.repository}:{v}')}" for v in shape.versions
    )
    pattern = f"^{repo}(:({versions}))?@sha256:[0-9a-f]{{64}}$"
    return f"(has({var}.image) && ({exact} || {var}.image.matches({quote(pattern)})))"


def _env_value(env: Env, var: str) -> str:
    """CEL over the env entry `e` of container `var`: its value is what the shape allows."""
    plain = "!has(e.valueFrom)"
    if env.kind == "free":
        return plain
    if env.kind == "field_ref":
        return (
            "(!has(e.value) && has(e.valueFrom) && has(e.valueFrom.fieldRef) && "
            f"e.valueFrom.fieldRef.fieldPath == {quote(env.values[0])})"
        )
    if env.kind == "own_name":
        return f"({plain} && has(e.value) && e.value == {var}.name)"
    if env.kind == "empty":
        return f"({plain} && (!has(e.value) || e.value == ''))"
    if env.kind == "template":
        return f"({plain} && has(e.value) && e.value.matches({quote(argo_template_pattern())}))"
    return f"({plain} && has(e.value) && e.value in {string_list(env.values)})"


def _env_ok(shape: Shape, var: str = "c") -> str:
    """CEL over `e`: the entry is one the shape has, with its value."""
    return (
        "("
        + " || ".join(f"(e.name == {quote(v.name)} && {_env_value(v, var)})" for v in shape.env)
        + ")"
    )


def _own_mount(mount: Mount) -> str:
    """CEL over `m`: the shape's own mount, on an emptyDir of that name."""
    if mount.sub_path == "digits":
        sub = "has(m.subPath) && m.subPath.matches('^[0-9]+$')"
    else:
        sub = "!has(m.subPath)"
    return (
        f"(m.name == {quote(mount.name)} && m.mountPath == {quote(mount.path)} && {sub} && "
        "(!has(m.readOnly) || m.readOnly == false))"
    )


def _mirror_mount() -> str:
    """CEL over `m`: `wait`'s copy of one of main's mounts under /mainctrfs (Argo drops readOnly)."""
    main = quote(contract.KFP_MAIN_CONTAINER)
    return (
        f"(m.mountPath.startsWith({quote(MIRROR_DIR + '/')}) && {SPEC}.containers.exists(x, "
        f"x.name == {main} && has(x.volumeMounts) && x.volumeMounts.exists(y, y.name == m.name && "
        f"{quote(MIRROR_DIR)} + y.mountPath == m.mountPath && (has(y.subPath) ? "
        "(has(m.subPath) && m.subPath == y.subPath) : !has(m.subPath)))))"
    )


def _platform_mount(profile: TenantProfile) -> str:
    """CEL over `m`: a mount the mutating policy adds to every container, or the token's."""
    mounts, volumes = platform_mounts(profile)
    allowed = [mount_is(m, platform_source(volumes[m["name"]])) for m in mounts]
    return "(" + " || ".join([*allowed, SERVICE_ACCOUNT_TOKEN_MOUNT]) + ")"


def _mount_ok(shape: Shape, profile: TenantProfile) -> str:
    own = [_own_mount(m) for m in shape.mounts]
    if shape.mirrors_main:
        own.append(_mirror_mount())
    common = "!has(m.subPathExpr) && !has(m.mountPropagation) && !has(m.recursiveReadOnly)"
    return f"(({common}) && ({' || '.join(own)} || {_platform_mount(profile)}))"


def _system_volumes_ok() -> str:
    """CEL: Argo's and KFP's volumes, where the pod has them, are emptyDirs (a ConfigMap or image
    named var-run-argo would hand `main` the tenant's argoexec)."""
    names = string_list(SYSTEM_VOLUMES)
    return (
        f"(!has({SPEC}.volumes) || {SPEC}.volumes.all(v, !(v.name in {names}) || has(v.emptyDir)))"
    )


def _whole(shape: Shape, lst: str, profile: TenantProfile) -> str:
    """CEL over `c`: the container is `shape`, whole."""
    return (
        f"(c.name == {quote(shape.name)} && {system_container()} && {_image_ok(shape)} && "
        f"{common_ok(lst)} && (!has(c.env) || c.env.all(e, {_env_ok(shape)})) && "
        f"(!has(c.volumeMounts) || c.volumeMounts.all(m, {_mount_ok(shape, profile)})))"
    )


def _claims(var: str = "c") -> str:
    """CEL: container `var` claims to be a system container (image or name)."""
    return f"({system_image(var)} || {var}.name in {string_list(SYSTEM_NAMES)})"


def _list_ok(lst: str, profile: TenantProfile) -> str:
    shapes = [s for s in SHAPES if lst in s.lists]
    if not shapes:
        return f"!{_claims()}"
    return f"(!{_claims()} || {' || '.join(_whole(s, lst, profile) for s in shapes)})"


def _if(condition: str, text: str) -> str:
    """A problem item: the CEL string `text` where `condition` holds, else ''."""
    return f"(({condition}) ? {text} : '')"


def _problems(lst: str, profile: TenantProfile) -> str:
    """CEL over `c` (a claiming container of `lst` that is not whole): its first problem, naming
    the field as written and the fix."""
    shapes = {s.name: s for s in SHAPES if lst in s.lists}
    items = [
        _if(
            f"!(c.name in {string_list(shapes)})",
            quote(
                "uses a KFP/Argo image or name, but KFP and Argo put no container of this name "
                f"in {lst}: remove it"
            ),
        ),
        _if(
            f"!{system_container()}",
            quote(
                "has not the name, image, command and args KFP 2.17 and Argo v4.0.5 give it: "
                "write them as they do (docs/admission-rules.md, KFP and Argo pod shapes)"
            ),
        ),
    ]
    for shape in shapes.values():
        items.append(
            _if(
                f"c.name == {quote(shape.name)} && !{_image_ok(shape)}",
                "'image ' + (has(c.image) ? c.image : '') + "
                + quote(
                    f" is not {shape.repository} at a supported version "
                    f"({', '.join(shape.versions)}, or by digest): use that image"
                ),
            )
        )
    items += [
        _if(f"has(c.{field})", quote(f"sets {field}, which KFP and Argo never write: remove it"))
        for field in refused_fields(lst)
    ]
    items.append(
        _if(
            f"has(c.imagePullPolicy) && !(c.imagePullPolicy in {string_list(PULL_POLICIES)})",
            quote(f"imagePullPolicy must be one of {', '.join(PULL_POLICIES)}"),
        )
    )
    items.append(
        _if(
            f"(has(c.terminationMessagePath) && c.terminationMessagePath != "
            f"{quote(TERMINATION_MESSAGE_PATH)}) || (has(c.terminationMessagePolicy) && "
            f"!(c.terminationMessagePolicy in {string_list(TERMINATION_MESSAGE_POLICIES)}))",
            quote(
                f"terminationMessagePath must be the default {TERMINATION_MESSAGE_PATH} (and the "
                "policy File or FallbackToLogsOnError): remove it"
            ),
        )
    )
    items.append(
        _if(
            f"!{resources_ok()}",
            quote(
                f"resources may name only {', '.join(NATIVE_RESOURCES)} and no claims: remove the "
                "others"
            ),
        )
    )
    items.append(
        _if(
            f"!{security_context_ok()}",
            quote(
                "securityContext is weaker than KFP and Argo write it (allowPrivilegeEscalation "
                "false, capabilities drop [ALL] and no add, runAsNonRoot true, runAsUser and "
                "runAsGroup above 0, readOnlyRootFilesystem true, seccompProfile RuntimeDefault, "
                "nothing else): write it so"
            ),
        )
    )
    for shape in shapes.values():
        env_ok = _env_ok(shape)
        items.append(
            _if(
                f"c.name == {quote(shape.name)} && has(c.env) && !c.env.all(e, {env_ok})",
                f"'env ' + c.env.filter(e, !{env_ok})[0].name + "
                + quote(
                    f" is not set as Argo sets it in {shape.description} (a variable it does not "
                    "have, another value, or for ARGO_TEMPLATE a key KFP's executor template "
                    "does not use): remove it"
                ),
            )
        )
    # Last: everything else of the container is whole, so a mount is not. Its full test is too deep
    # for the C++ parser inside a message (32 levels): the mount named is the first whose name and
    # path are none of the shape's (a wrong subPath, readOnly or source names the field alone).
    for shape in shapes.values():
        pairs = string_list(
            [f"{m.name} at {m.path}" for m in shape.mounts]
            + [f"{m['name']} at {m['mountPath']}" for m in platform_mounts(profile)[0]]
        )
        odd = (
            f"!(m.name + ' at ' + m.mountPath in {pairs}) && "
            f"!m.mountPath.startsWith({quote(MIRROR_DIR + '/')}) && "
            "!m.name.startsWith('kube-api-access-')"
        )
        items.append(
            _if(
                f"c.name == {quote(shape.name)}",
                "'volumeMounts' + ((has(c.volumeMounts) ? c.volumeMounts.filter(m, "
                f"{odd}).map(m, ' ' + m.name + ' at ' + m.mountPath) : []) + [''])[0] + "
                + quote(
                    f": not a mount {shape.description} has (its own emptyDirs, main's mounts "
                    "under /mainctrfs for wait, the platform's read-only mounts, the service "
                    "account token; no subPathExpr, mountPropagation or recursiveReadOnly): remove "
                    "it"
                ),
            )
        )
    fallback = quote("is not one of KFP's or Argo's own containers in its own shape")
    return f"([{', '.join(items)}, {fallback}].filter(t, t != '')[0])"


_OPEN, _CLOSE = ' "', '" '  # around a container's name in a message
_NOUNS = {
    "containers": "container",
    "initContainers": "init container",
    "ephemeralContainers": "ephemeral container",
}


def system_container_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.systemContainers` of `profile` (every pod)."""
    lists = {lst: _list_ok(lst, profile) for lst in CONTAINER_LISTS}
    parts = [
        f"{SPEC}.{lst}.all(c, {ok})"
        if lst == "containers"
        else f"(!has({SPEC}.{lst}) || {SPEC}.{lst}.all(c, {ok}))"
        for lst, ok in lists.items()
    ]
    expression = " && ".join([*parts, _system_volumes_ok()])
    per_list = ", ".join(
        f"(has({SPEC}.{lst}) ? {SPEC}.{lst}.filter(c, !{ok}).map(c, "
        f"({quote(_NOUNS[lst] + _OPEN)} + c.name) + ({quote(_CLOSE)} + "
        + (
            _problems(lst, profile)
            if lst != "ephemeralContainers"
            else quote(
                "uses a KFP/Argo image or name: KFP and Argo add no ephemeral container; remove it"
            )
        )
        + ")) : [])"
        for lst, ok in lists.items()
    )
    volumes = quote(
        f"the volumes {', '.join(SYSTEM_VOLUMES)} must be emptyDirs, as KFP and Argo write them"
    )
    message = f"[{per_list}, [{volumes}]].filter(n, size(n) > 0)[0][0]"
    return [
        tenant_rule(
            profile,
            "secureml.systemContainers",
            "KFP's and Argo's own containers (init, wait, kfp-launcher, the driver) are exactly "
            "what KFP 2.17 and Argo v4.0.5 write, field by field; no ephemeral container claims "
            "to be one",
            expression,
            message,
            scope=EVERY_POD,
        )
    ]
