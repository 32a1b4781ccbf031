"""Names shared by the compiler, the tenant bundle, the launcher and the shim.

Change one only with the tests on both sides (docs/architecture.md, Contracts between the parts).
"""

from __future__ import annotations

import re

# --- pod labels set on every secure step (kfp.kubernetes.add_pod_label) -------------------------
LABEL_PREFIX = "secureml.dev/"
LABEL_TENANT = "secureml.dev/tenant"
LABEL_PIPELINE = "secureml.dev/pipeline"
LABEL_STEP = "secureml.dev/step"
LABEL_ISOLATION = "secureml.dev/isolation"  # one of ISOLATION_LEVELS
LABEL_GPU_CLAIM = "secureml.dev/gpu-claim"  # dra backend: name of the ResourceClaimTemplate
REQUIRED_LABELS = (LABEL_TENANT, LABEL_PIPELINE, LABEL_STEP, LABEL_ISOLATION)

# Isolation levels, weakest first (docs/architecture.md "Isolation model"). "none": no GPU.
ISOLATION_LEVELS = ("timeslice", "timeslice-shim", "mig", "dedicated")
ISOLATION_NONE = "none"
ISOLATION_TIMESLICE = "timeslice"
ISOLATION_TIMESLICE_SHIM = "timeslice-shim"  # a time slice under the enforced quota shim

# The service account the pipeline runner (KFP's Argo workflows) runs step pods as; the bundle
# creates it and the admission rules require it.
RUNNER_NAME = "secureml-pipeline-runner"

# --- pod annotations (kfp.kubernetes.add_pod_annotation) ----------------------------------------
ANNOTATION_SPIFFE_ID = "secureml.dev/spiffe-id"
ANNOTATION_IMAGE_DIGEST = "secureml.dev/image-digest"  # "sha256:<hex>"
ANNOTATION_GPU_REQUEST = "secureml.dev/gpu-request"  # compact JSON of the GPU request
ANNOTATION_LIMITS = "secureml.dev/limits"  # the shim limits file, verbatim (format below)
# "required" on a GPU step of a profile with gpu.confidentialComputing: required (admission pins
# it); the launcher's preflight then verifies the GPUs' CC mode through NVML (docs/confidential-computing.md).
ANNOTATION_CONFIDENTIAL_COMPUTING = "secureml.dev/confidential-computing"
CONFIDENTIAL_COMPUTING_REQUIRED = "required"
ANNOTATION_VERIFY_INPUTS = "secureml.dev/verify-inputs"  # JSON: the inputs the launcher verifies

# --- the shim limits file ------------------------------------------------------------------------
# In a cluster the MutatingAdmissionPolicy mounts the pod's own ANNOTATION_LIMITS through a
# downward-API volume at SHIM_LIMITS_PATH; the step cannot rewrite it. Format: one `key=value` per
# line, `#` comments; keys: `version` (1), `memory` (bytes per device), `compute` (percent 1-100),
# `scrub_on_free` (0|1). docs/shim.md is the authority on the grammar.
PODINFO_DIR = "/etc/secureml/podinfo"
SHIM_LIMITS_PATH = f"{PODINFO_DIR}/limits"
# The pod's own labels and annotations (downward API, `key="value"` lines), from the same volume:
# the launcher takes its pod-level settings from them and stops when its environment disagrees.
PODINFO_LABELS = f"{PODINFO_DIR}/labels"
PODINFO_ANNOTATIONS = f"{PODINFO_DIR}/annotations"
SHIM_PRELOAD_FILE = "/etc/ld.so.preload"
# Where hardened images install the shim; the MutatingAdmissionPolicy writes this path into
# SHIM_PRELOAD_FILE (read-only, from ANNOTATION_SHIM_PRELOAD through a downward-API subPath mount).
SHIM_LIBRARY_PATH = "/usr/local/lib/secureml/libsecureml_shim.so"
ANNOTATION_SHIM_PRELOAD = "secureml.dev/shim-preload"  # set (overwritten) by the admission policy

# --- the injected runtime (issue 10 class 9; /work/notes/s3/contract-runtime.md) -----------------
# The launcher and the shim come from the platform's runtime image, not the step's: the mutating
# policy adds the init container RUNTIME_INIT_CONTAINER of the profile's `runtime.image`, which runs
# RUNTIME_INSTALL_COMMAND to copy its payload (RUNTIME_PAYLOAD_DIR) into the emptyDir
# RUNTIME_VOLUME; every tenant container mounts that volume read-only at RUNTIME_DIR. The preload
# file names RUNTIME_SHIM, and `main` runs [RUNTIME_LAUNCHER, "--", <argv>].
RUNTIME_INIT_CONTAINER = "secureml-runtime"
RUNTIME_VOLUME = "secureml-runtime"
# RUNTIME_VOLUME is memory-backed (tmpfs: the copy takes a fraction of a second where a disk
# emptyDir took seconds), capped at RUNTIME_VOLUME_SIZE_LIMIT, which the payload must fit
# (its manifest's `bytes`; docs/performance.md); its pages count toward the pod's memory.
RUNTIME_VOLUME_SIZE_LIMIT = "128Mi"
RUNTIME_VOLUME_EMPTY_DIR = {"medium": "Memory", "sizeLimit": RUNTIME_VOLUME_SIZE_LIMIT}
RUNTIME_DIR = "/opt/secureml"
RUNTIME_PAYLOAD_DIR = "/secureml-runtime"
RUNTIME_INSTALL_COMMAND = (f"{RUNTIME_PAYLOAD_DIR}/install", RUNTIME_DIR)
RUNTIME_LAUNCHER = f"{RUNTIME_DIR}/bin/secureml-launch"
RUNTIME_PYTHON = f"{RUNTIME_DIR}/python/bin/python3"  # what RUNTIME_LAUNCHER execs
RUNTIME_SHIM = f"{RUNTIME_DIR}/lib/libsecureml_shim.so"
RUNTIME_LAUNCHER_PREFIX = (RUNTIME_LAUNCHER, "--")
# Paths the platform owns inside a step's container: the system folders (the read-only image, the
# loader and its preload file), the shim's folder, the injected runtime, the pod's podinfo files, KFP's launcher folder
# and Argo's executor folder. No tenant volume is mounted at, above or below one of them
# (secureml.rules.mounts; the SPIFFE socket folder of the profile joins them there).
PLATFORM_PATHS = (
    "/etc",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/usr/local/lib/secureml",
    RUNTIME_DIR,
    "/etc/secureml",
    "/etc/ld.so.preload",
    "/kfp-launcher",
    "/var/run/argo",
)


def touches_platform_path(path: str, extra: tuple[str, ...] = ()) -> bool:
    """Whether a mount at `path` would cover, sit inside, or hide one of the platform's paths."""
    clean = "/" + "/".join(part for part in path.split("/") if part and part != ".")
    if ".." in clean.split("/"):
        return True
    for owned in (*PLATFORM_PATHS, *extra):
        if clean == owned or clean == "/" or owned.startswith(clean + "/"):
            return True
        if clean.startswith(owned + "/"):
            return True
    return False


# --- KFP / Argo pods --------------------------------------------------------------------------
# The container that runs the step's own command in a KFP executor pod (Argo's "main"); the
# admission policy gives it the DRA claim. KFP's and Argo's own images, admitted by the image policy
# without a tenant signature (repositories, any tag or digest).
KFP_MAIN_CONTAINER = "main"
KFP_DRIVER_REPOSITORY = "ghcr.io/kubeflow/kfp-driver"
KFP_LAUNCHER_REPOSITORY = "ghcr.io/kubeflow/kfp-launcher"
ARGOEXEC_REPOSITORY = "quay.io/argoproj/argoexec"
KFP_SYSTEM_IMAGES = (KFP_DRIVER_REPOSITORY, KFP_LAUNCHER_REPOSITORY, ARGOEXEC_REPOSITORY)
# KFP's platform operations (kfp.kubernetes.CreatePVC / DeletePVC): the backend's Argo compiler
# (argocompiler `dummyImages`, release-2.17) runs only the driver for a task with one of these
# images, which makes the PVC call itself; no container of the image ever runs.
KFP_PLATFORM_OP_IMAGES = ("argostub/createpvc", "argostub/deletepvc")
# The system containers by name, and the paths their commands use (secureml/pods/preview.py and
# secureml/pods/argo.py build them; secureml/rules/scope.py admits exactly these shapes).
KFP_LAUNCHER_CONTAINER = "kfp-launcher"  # init container: `launcher-v2 --copy KFP_LAUNCHER_BINARY`
KFP_LAUNCHER_DIR = "/kfp-launcher"
KFP_LAUNCHER_BINARY = f"{KFP_LAUNCHER_DIR}/launch"
KFP_LAUNCHER_COPY_COMMAND = "launcher-v2"
KFP_DRIVER_COMMAND = "driver"
ARGO_INIT_CONTAINER = "init"  # init container: `argoexec init <log flags>`
ARGO_WAIT_CONTAINER = "wait"  # container: `argoexec wait <log flags>`
ARGO_VAR_RUN_DIR = "/var/run/argo"
ARGO_EXECUTOR_BINARY = f"{ARGO_VAR_RUN_DIR}/argoexec"  # the emissary, copied there by `init`
# KFP's executor template imports this ConfigMap into `main` with `envFrom` and no prefix (KFP's
# profile controller writes it into every tenant namespace with exactly these keys). The rules
# admit that one import; the bundle refuses the ConfigMap with any other key.
KFP_METADATA_CONFIGMAP = "metadata-grpc-configmap"
KFP_METADATA_CONFIGMAP_KEYS = ("METADATA_GRPC_SERVICE_HOST", "METADATA_GRPC_SERVICE_PORT")

# --- the launcher -----------------------------------------------------------------------------
LAUNCHER_MODULE = "secureml.enforcement.launch"
LAUNCHER_PREFIX = ("python3", "-m", LAUNCHER_MODULE, "--")

ENV_PREFIX = "SECUREML_"
ENV_TENANT = "SECUREML_TENANT"
ENV_NAMESPACE = "SECUREML_NAMESPACE"
ENV_PIPELINE = "SECUREML_PIPELINE"
ENV_STEP = "SECUREML_STEP"
ENV_ISOLATION = "SECUREML_ISOLATION"
ENV_IMAGE = "SECUREML_IMAGE"  # the digest-pinned image reference
ENV_GPU_REQUEST = "SECUREML_GPU_REQUEST"  # same JSON as ANNOTATION_GPU_REQUEST
ENV_EXPECTED_SPIFFE_ID = "SECUREML_EXPECTED_SPIFFE_ID"
ENV_IDENTITY_REQUIRED = "SECUREML_IDENTITY_REQUIRED"  # "true" | "false"
ENV_SCRUB_BEFORE = "SECUREML_SCRUB_BEFORE"  # "true" | "false"
ENV_SCRUB_AFTER = "SECUREML_SCRUB_AFTER"
ENV_SCRUB_VERIFY = "SECUREML_SCRUB_VERIFY"  # off | sample | full
ENV_SHIM_MODE = "SECUREML_SHIM"  # off | enforce
ENV_SHIM_LIMITS_FILE = "SECUREML_SHIM_LIMITS_FILE"  # default SHIM_LIMITS_PATH
ENV_CONFIDENTIAL_COMPUTING = (
    "SECUREML_CONFIDENTIAL_COMPUTING"  # same as ANNOTATION_CONFIDENTIAL_COMPUTING
)
ENV_SHIM_COUNTERS_FILE = "SECUREML_SHIM_COUNTERS_FILE"  # where the shim writes its counters
ENV_SHIM_LOG_LEVEL = "SECUREML_SHIM_LOG_LEVEL"  # off (default) | error | warn | info | debug
ENV_SHIM_LIBRARY = "SECUREML_SHIM_LIBRARY"  # launcher side only: another build of the shim
ENV_AUDIT_DIR = "SECUREML_AUDIT_DIR"
# Signed inputs (docs/supply-chain.md "Signed models"): which of the step's input artifacts the
# launcher verifies (same JSON as ANNOTATION_VERIFY_INPUTS), and the profile's model trust (JSON:
# signers, keys, trusted root), which admission pins to the profile's own rendering.
ENV_VERIFY_INPUTS = "SECUREML_VERIFY_INPUTS"
ENV_MODEL_TRUST = "SECUREML_MODEL_TRUST"
# Exported by the launcher's verify-inputs stage to the step: the JSON file of what it verified.
ENV_VERIFIED_INPUTS = "SECUREML_VERIFIED_INPUTS"
# Launcher tuning (defaults in docs/launcher.md); the compiler need not set them.
ENV_IDENTITY_TIMEOUT = "SECUREML_IDENTITY_TIMEOUT"  # seconds for the Workload API, default 10
ENV_IDENTITY_DIR = "SECUREML_IDENTITY_DIR"  # parent of the step's private SVID folder
ENV_WATCHDOG_INTERVAL = "SECUREML_WATCHDOG_INTERVAL"  # seconds between NVML polls, default 0.5
ENV_WATCHDOG_GRACE = "SECUREML_WATCHDOG_GRACE"  # seconds from TERM to KILL, default 10
AUDIT_LINE_PREFIX = "secureml-audit: "  # the launcher's stderr line that carries the audit record
SPIFFE_SOCKET_ENV = "SPIFFE_ENDPOINT_SOCKET"  # the SPIFFE standard variable, "unix:///path"
# Exported by the launcher's identity stage to the step: PEM files in a private (0700) folder.
ENV_SVID_CERT = "SECUREML_SVID_CERT"  # the X.509-SVID chain, leaf first
ENV_SVID_KEY = "SECUREML_SVID_KEY"  # its PKCS#8 private key (0600)
ENV_SVID_BUNDLE = "SECUREML_SVID_BUNDLE"  # the trust domain's CA bundle

# Environment a step may never set: each one switches a control off or replaces the preload.
# (Variables starting with ENV_PREFIX are the compiler's alone; a step may not set those either.)
FORBIDDEN_ENV = (
    "CUDA_DISABLE_CONTROL",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_DEVICE_SM_LIMIT",
    "GPU_CORE_UTILIZATION_POLICY",
    # Read by the NVIDIA container runtime: set in the pod spec, they hand a container GPUs (or MIG
    # configuration rights) that the device plugin never allocated to it.
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
)

# --- multi-node training through Kubeflow Trainer (docs/trainer.md) ------------------------------
# Every node pod of a step's TrainJob carries LABEL_TRAINER_NODE ("true") beside the step labels;
# admission holds such a pod to the node shape (one container TRAINER_NODE_CONTAINER running the
# launcher, no KFP launcher) and SPIRE issues it `<step's ID>/node/<index>`, the index being the
# Job controller's LABEL_JOB_COMPLETION_INDEX, which the launcher reads from its podinfo labels.
LABEL_TRAINER_NODE = "secureml.dev/trainer-node"
LABEL_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"  # the TrainJob's name, set by JobSet
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API_VERSION = f"{TRAINER_GROUP}/v1alpha1"
TRAINER_NODE_CONTAINER = "node"  # the trainer container of Trainer's runtimes
TRAINER_REPLICATED_JOB = "node"  # the replicated job of the trainer ancestor
TRAINER_PATCH_MANAGER = "secureml.dev/compiler"
SPIFFE_NODE_SEGMENT = "/node/"
ENV_TRAINER_NODE = "SECUREML_TRAINER_NODE"  # local runs only: the node index (no podinfo there)
ENV_TRAINER_LOCAL = "SECUREML_TRAINER_LOCAL"  # local runs only: nodes as local processes

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """A Kubernetes label value for `text`: at most 63 characters, alphanumeric at both ends."""
    value = _LABEL_VALUE_BAD.sub("-", text).strip("-_.")
    return value[:63].rstrip("-_.")


def render_shim_limits(
    *, memory_bytes: int, compute_percent: int, scrub_on_free: bool, firewall: bool = False
) -> str:
    """The shim limits file (and the ANNOTATION_LIMITS value) for one step.

    `firewall=1` is written only when the CUDA firewall is on: the shim's default is off, so an
    absent line and `firewall=0` mean the same and admission accepts only one spelling of each.
    """
    return (
        "version=1\n"
        f"memory={memory_bytes}\n"
        f"compute={compute_percent}\n"
        f"scrub_on_free={int(scrub_on_free)}\n" + ("firewall=1\n" if firewall else "")
    )
