"""The whole shape of every container KFP 2.17.0 and Argo Workflows v4.0.5 put in a pod, as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from secureml.core import contract
from secureml.pods.argo import (
    ARGO_VERSION,
    MAIN_FILESYSTEM_DIR,
    PROGRESS_FILE,
    TMP_DIR_ARGO,
    VAR_RUN_ARGO,
)
from secureml.pods.preview import KFP_LAUNCHER_VOLUME, KFP_VERSION

# The fields a system container may carry; every other Container field must be absent.
CONTAINER_FIELDS = (
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "resources",
    "securityContext",
    "volumeMounts",
    "terminationMessagePath",
    "terminationMessagePolicy",
)
# Every field of the Container and EphemeralContainer schemas of Kubernetes 1.34-1.36 (checked
# against the API server's OpenAPI by tests/cluster/test_pod_fields.py).
CONTAINER_SCHEMA_FIELDS = (
    "args",
    "command",
    "env",
    "envFrom",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "name",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "restartPolicyRules",
    "securityContext",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "targetContainerName",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
)
# Every field of SecurityContext, likewise.
SECURITY_CONTEXT_SCHEMA_FIELDS = (
    "allowPrivilegeEscalation",
    "appArmorProfile",
    "capabilities",
    "privileged",
    "procMount",
    "readOnlyRootFilesystem",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seLinuxOptions",
    "seccompProfile",
    "windowsOptions",
)
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TERMINATION_MESSAGE_PATH = "/dev/termination-log"  # the API's default
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")

# Security context: each field the shape allows and the value it must have ("positive": an
# integer above 0). Any other field of SecurityContext must be absent.
SecurityValue = bool | str | Literal["positive"]
SECURITY_CONTEXT: dict[str, SecurityValue] = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": "positive",
    "runAsGroup": "positive",
    "readOnlyRootFilesystem": True,
}
CAPABILITIES_DROP = ("ALL",)  # capabilities: exactly `drop: [ALL]`, no `add`
SECCOMP_TYPE = "RuntimeDefault"  # seccompProfile: exactly `type: RuntimeDefault`

EnvKind = Literal["free", "exact", "one_of", "own_name", "field_ref", "template", "empty"]


@dataclass(frozen=True)
class Env:
    """One variable Argo or KFP sets in a system container and the value it may have."""

    name: str
    kind: EnvKind
    values: tuple[str, ...] = ()


# `createEnvVars`: the executor's own (init, wait).
ARGO_EXECUTOR_ENV = (
    Env("ARGO_POD_NAME", "field_ref", ("metadata.name",)),
    Env("ARGO_POD_UID", "field_ref", ("metadata.uid",)),
    Env("ARGO_WORKFLOW_NAME", "free"),
    Env("ARGO_WORKFLOW_UID", "free"),
)
# `addArtifactPlugins`: the wait container's artifact plugins, none for KFP (an empty value, which
# the stored pod leaves out); seen on the pods Argo's real controller creates (tests/e2e).
ARGO_WAIT_ENV = (Env("ARGO_ARTIFACT_PLUGIN_NAMES", "empty"),)
# `createWorkflowPod`: every container's (progress reporting on, as Argo's default).
ARGO_CONTAINER_ENV = (
    Env("ARGO_CONTAINER_NAME", "own_name"),
    Env("ARGO_NODE_ID", "free"),
    Env("ARGO_INCLUDE_SCRIPT_OUTPUT", "one_of", ("true", "false")),
    Env("ARGO_DEADLINE", "free"),
    Env("ARGO_PROGRESS_FILE", "exact", (PROGRESS_FILE,)),
    Env("ARGO_PROGRESS_PATCH_TICK_DURATION", "free"),
    Env("ARGO_PROGRESS_FILE_TICK_DURATION", "free"),
    Env("ARGO_TERMINATION_GRACE_PERIOD_SECONDS", "free"),
)
# KFP's container driver's (`KFP_POD_ENV`).
KFP_POD_ENV = (
    Env("KFP_POD_NAME", "field_ref", ("metadata.name",)),
    Env("KFP_POD_UID", "field_ref", ("metadata.uid",)),
)
# Every init container's, besides: the template.
ARGO_TEMPLATE_ENV = Env("ARGO_TEMPLATE", "template")

# The keys of the JSON of KFP 2.17.0's executor templates (`system-container-impl`, with its
# metadata, retry and volume variants) and driver templates as Argo writes it into ARGO_TEMPLATE (inputs.parameters
# cleared); a map key of labels, annotations, resources or node selectors passes when it holds a
# `/` or `.` (no field of Argo's template types does), or is a native resource name.
ARGO_TEMPLATE_KEYS = (
    # Template
    "name",
    "inputs",
    "outputs",
    "metadata",
    "labels",
    "annotations",
    "container",
    "initContainers",
    "volumes",
    "podSpecPatch",
    "securityContext",
    "retryStrategy",
    "nodeSelector",
    "tolerations",
    "parameters",
    # Parameter and ValueFrom of the driver templates (`system-container-driver`,
    # `system-dag-driver`): an input's default, an output read from a file with its default (seen
    # in the driver pods Argo's real controller creates, tests/e2e/test_argo_run.py)
    "default",
    # RetryStrategy
    "limit",
    "retryPolicy",
    "backoff",
    "duration",
    "factor",
    "maxDuration",
    # Container
    "image",
    "command",
    "args",
    "env",
    "value",
    "valueFrom",
    "fieldRef",
    "fieldPath",
    "apiVersion",
    "secretKeyRef",
    "configMapKeyRef",
    "key",
    "optional",
    "envFrom",
    "configMapRef",
    "secretRef",
    "prefix",
    "resources",
    "limits",
    "requests",
    "volumeMounts",
    "mountPath",
    "readOnly",
    "subPath",
    "imagePullPolicy",
    # SecurityContext
    "allowPrivilegeEscalation",
    "capabilities",
    "drop",
    "seccompProfile",
    "type",
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "readOnlyRootFilesystem",
    # Volume sources KFP's kubernetes platform spec adds
    "emptyDir",
    "medium",
    "sizeLimit",
    "persistentVolumeClaim",
    "claimName",
    "secret",
    "secretName",
    "configMap",
    "items",
    "path",
    "defaultMode",
    # Toleration
    "operator",
    "effect",
    "tolerationSeconds",
)


# A Kubernetes label or annotation key: an optional DNS-subdomain prefix and `/`, then a name.
METADATA_KEY = "(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"


def argo_template_pattern() -> str:
    """A regular expression (RE2 and Rust `regex` alike) for ARGO_TEMPLATE's JSON: an object whose
    every key is one of ARGO_TEMPLATE_KEYS or a prefixed map key, or any label key inside a
    `labels` or `annotations` object of strings (the pod metadata KFP's template carries).

    JSON is read as tokens: a key is a string followed by `:`, and the only string token that may
    be followed by `:` is an allowed key written plainly (no escape), so no other key, nor an
    escaped or differently cased spelling of a field Go's decoder would match, can appear at any
    depth; any other string must be followed by `,`, `}` or `]`.
    """
    ws = "[ \\t\\n\\r]*"
    string = '"(?:[^"\\\\\\x00-\\x1f]|\\\\.)*"'
    names = "|".join(ARGO_TEMPLATE_KEYS + NATIVE_RESOURCES)
    prefixed = "[A-Za-z0-9_-]*[./][A-Za-z0-9_./-]*"
    key = f'"(?:{names}|{prefixed})"{ws}:'
    after = f"{ws}[,}}\\]]"
    literal = "(?:-?[0-9][0-9.eE+-]*|true|false|null)"
    # The template's pod labels and annotations (`kfp.kubernetes.add_pod_label`/`_annotation`),
    # a flat object of strings read whole, so that its keys may be any label key, prefixed or
    # not: a key inside it is a map key, never a field of Argo's template types.
    entry = f'"{METADATA_KEY}"{ws}:{ws}{string}'
    metadata_map = (
        f'"(?:labels|annotations)"{ws}:{ws}\\{{{ws}(?:{entry}{ws}(?:,{ws}{entry}{ws})*)?\\}}{after}'
    )
    tokens = f"[ \\t\\n\\r{{\\[,}}\\]]|{metadata_map}|{key}|{string}{after}|{literal}{after}"
    return f"^{ws}\\{{(?:{tokens})*$"


@dataclass(frozen=True)
class Mount:
    """A mount a system container may have: `sub_path` "" for none, "digits" for Argo's index."""

    name: str
    path: str
    sub_path: str = ""


@dataclass(frozen=True)
class Shape:
    """One system container: where it sits, its image, env and mounts (the command and args are
    `secureml.rules.scope.system_container`'s, which names them)."""

    name: str
    lists: tuple[str, ...]
    repository: str
    versions: tuple[str, ...]
    env: tuple[Env, ...]
    mounts: tuple[Mount, ...]
    mirrors_main: bool = False  # `wait`: main's mounts under MAIN_FILESYSTEM_DIR
    description: str = ""


VAR_RUN = Mount(VAR_RUN_ARGO, contract.ARGO_VAR_RUN_DIR)
# The emptyDirs of these names must be emptyDirs wherever a system container mounts them.
SYSTEM_VOLUMES = (VAR_RUN_ARGO, TMP_DIR_ARGO, KFP_LAUNCHER_VOLUME)
ARGO_VERSIONS = (ARGO_VERSION,)
KFP_VERSIONS = (KFP_VERSION,)

SHAPES = (
    Shape(
        contract.ARGO_INIT_CONTAINER,
        ("initContainers",),
        contract.ARGOEXEC_REPOSITORY,
        ARGO_VERSIONS,
        (*ARGO_EXECUTOR_ENV, *ARGO_CONTAINER_ENV, ARGO_TEMPLATE_ENV),
        (VAR_RUN,),
        description="Argo's init",
    ),
    Shape(
        contract.ARGO_WAIT_CONTAINER,
        ("containers",),
        contract.ARGOEXEC_REPOSITORY,
        ARGO_VERSIONS,
        (*ARGO_EXECUTOR_ENV, *ARGO_CONTAINER_ENV, *ARGO_WAIT_ENV),
        (VAR_RUN, Mount(TMP_DIR_ARGO, "/tmp", "digits")),
        mirrors_main=True,
        description="Argo's wait",
    ),
    Shape(
        contract.KFP_LAUNCHER_CONTAINER,
        ("initContainers",),
        contract.KFP_LAUNCHER_REPOSITORY,
        KFP_VERSIONS,
        (*ARGO_CONTAINER_ENV, ARGO_TEMPLATE_ENV),
        (VAR_RUN, Mount(KFP_LAUNCHER_VOLUME, contract.KFP_LAUNCHER_DIR)),
        description="KFP's kfp-launcher",
    ),
    Shape(
        contract.KFP_MAIN_CONTAINER,
        ("containers",),
        contract.KFP_DRIVER_REPOSITORY,
        KFP_VERSIONS,
        (*KFP_POD_ENV, *ARGO_CONTAINER_ENV),
        (VAR_RUN,),
        description="KFP's driver",
    ),
)
# A container of one of these names, or of a system image, must be its shape.
SYSTEM_NAMES = tuple(sorted({s.name for s in SHAPES} - {contract.KFP_MAIN_CONTAINER}))
MIRROR_DIR = MAIN_FILESYSTEM_DIR
