"""The TenantProfile: one YAML file per tenant, written by the platform team.

Field descriptions become the JSON Schema and the messages; attributes are the YAML names in snake_case.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from secureml.core import contract
from secureml.core.contract import ISOLATION_TIMESLICE, ISOLATION_TIMESLICE_SHIM
from secureml.core.errors import InputError, ProfileError, SecuremlError
from secureml.core.image_ref import ImageRef
from secureml.core.quantity import QUANTITY_PATTERN, parse_bytes
from secureml.nvidia.catalogue import (
    LABEL_SHARING_STRATEGY,
    MIG_CATALOGUE,
    MIG_RESOURCE_PREFIX,
    NVIDIA_RESOURCE_PREFIX,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    SHARING_TIME_SLICING,
    models_offering,
)
from secureml.profile.loading import LoadedYaml, load_yaml
from secureml.profile.partial import did_you_mean, parsed_part

_TIER = "spec.tier"  # the path cross-field checks name when they read the tier

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# The least GPU memory a profile may grant a step: a smaller value is a number missing its unit.
MIN_GPU_MEMORY = 256 * 2**20


def _gpu_memory(value: object) -> int:
    """A GPU memory size of the profile: a Kubernetes quantity, at least 256Mi. A bare number
    is bytes, as Kubernetes reads it, so `maxMemory: 16` would be 16 bytes: refused, naming the
    unit that was surely meant (a fix that itself passes)."""
    amount = parse_bytes(value)
    if amount < MIN_GPU_MEMORY:
        written = str(value).strip()
        if written.isdigit():
            raise ValueError(
                f"{written} has no unit, so it means {written} bytes; write the unit, "
                f"e.g. {written}Gi"
            )
        raise ValueError(f"{written} is less than 256Mi of GPU memory; write e.g. 8Gi")
    return amount


# A GPU memory size field: bytes, or a Kubernetes quantity (secureml.core.quantity) parsed on load.
ByteSize = Annotated[
    int,
    BeforeValidator(_gpu_memory),
    PlainSerializer(lambda v: v, return_type=int),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": MIN_GPU_MEMORY},
                {"type": "string", "pattern": QUANTITY_PATTERN},
            ],
            "description": "bytes, or a Kubernetes quantity such as 16Gi",
        }
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        use_enum_values=True,
    )


class Tier(StrEnum):
    """Security tier; it sets the weakest GPU isolation a step may use."""

    public = "public"
    internal = "internal"
    confidential = "confidential"
    restricted = "restricted"


# docs/architecture.md "Isolation model": the weakest level each tier allows.
TIER_MIN_ISOLATION = {
    "public": "timeslice",
    "internal": "timeslice-shim",
    "confidential": "mig",
    "restricted": "dedicated",
}


class Metadata(_Model):
    name: str = Field(pattern=_DNS_LABEL, description="Tenant name (a DNS label).")


class Owner(_Model):
    kind: Literal["User", "Group", "ServiceAccount"] = Field(
        "User", description="Kind of the Kubeflow profile owner."
    )
    name: str = Field(min_length=1, description="Owner name, e.g. alice@example.com.")


class MigSettings(_Model):
    allowed_profiles: list[str] = Field(
        default_factory=list, description="MIG profiles steps may request, e.g. 1g.10gb."
    )


class TimeSliceSettings(_Model):
    resource_name: str = Field(
        RESOURCE_GPU_SHARED,
        description="Extended resource the device plugin advertises for time-sliced replicas.",
    )
    max_memory: ByteSize = Field(description="Most GPU memory one step may use (shim limit).")
    max_compute: int = Field(ge=1, le=100, description="Most compute share (percent) per step.")
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {LABEL_SHARING_STRATEGY: SHARING_TIME_SLICING},
        description="Node labels of time-sliced GPU nodes.",
    )


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class WholeGpuSettings(_Model):
    max_per_step: int = Field(1, ge=1, le=64, description="Most whole GPUs one step may request.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels of the dedicated GPU pool."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations for the dedicated pool's taints."
    )


class GpuSettings(_Model):
    backend: Literal["device-plugin", "dra"] = Field(
        "device-plugin", description="How GPUs reach pods: NVIDIA device plugin or DRA driver."
    )
    mig_strategy: Literal["mixed", "single"] = Field(
        "mixed", description="Device plugin MIG strategy of the cluster's GPU nodes."
    )
    models: list[str] = Field(
        default_factory=list, description="GPU models in the tenant's pools, e.g. A100-80GB."
    )
    mig: MigSettings | None = Field(None, description="MIG slices; absent: forbidden.")
    time_slice: TimeSliceSettings | None = Field(
        None, description="Time-sliced shares; absent: forbidden."
    )
    whole_gpu: WholeGpuSettings | None = Field(None, description="Whole GPUs; absent: forbidden.")
    quota: dict[str, int] = Field(
        default_factory=dict,
        description="Namespace quota per extended resource, e.g. nvidia.com/mig-1g.10gb: 8.",
    )
    confidential_computing: Literal["off", "required"] = Field(
        "off",
        description="required: GPU steps run only on nodes whose GPUs are in confidential-computing "
        "mode (the GPU operator's CC manager labels them), and the launcher verifies the mode "
        "through NVML. Tiers confidential and restricted only, with CC-capable models only "
        "(H100, H200, B200).",
    )


class SignerIdentity(_Model):
    issuer: str = Field(min_length=1, description="OIDC issuer of the signing certificate.")
    subject: str | None = Field(None, description="Exact certificate identity (SAN).")
    subject_reg_exp: str | None = Field(
        None, description="Regular expression the certificate identity must match."
    )

    @model_validator(mode="after")
    def _one_subject(self) -> SignerIdentity:
        if (self.subject is None) == (self.subject_reg_exp is None):
            raise ValueError("give exactly one of subject or subjectRegExp")
        if self.subject_reg_exp is not None:
            problem = regexp_problem(self.subject_reg_exp)
            if problem is not None:
                raise ValueError(f"subjectRegExp {problem}")
        return self


# Kinds someone may hand `profile validate` by mistake, and the command that reads each.
_OTHER_COMMANDS = {
    "Pod": "secureml check-pod FILE --profile PROFILE",
    "Deployment": "secureml check-pod FILE --profile PROFILE (it checks a workload's pod template)",
    "Job": "secureml check-pod FILE --profile PROFILE (it checks a workload's pod template)",
}


def _another_kind(data: dict[str, Any]) -> str | None:
    """A message for a Kubernetes object of another kind than TenantProfile, else None: its
    field errors would describe a TenantProfile it never meant to be."""
    kind, api_version = data.get("kind"), data.get("apiVersion")
    if kind is None and "pipelineInfo" in data:
        return (
            "this is a compiled KFP pipeline, not a TenantProfile; did you mean "
            "`secureml compile PIPELINE.py --profile PROFILE`? (it compiles the pipeline's source)"
        )
    if not isinstance(kind, str) or kind == "TenantProfile":
        return None
    what = f"this is a {kind} ({api_version}), not a TenantProfile (secureml.dev/v1alpha1)"
    command = _OTHER_COMMANDS.get(kind)
    if command is not None:
        return f"{what}; did you mean `{command}`?"
    return f"{what}; pass the tenant's profile (profiles/<tenant>.yaml)"


def regexp_problem(pattern: str) -> str | None:
    """What is wrong with `pattern` as a signer's subject pattern, for a person; None if nothing.

    The image policies match it with Go's RE2 (policy-controller, Kyverno) and the compiler with
    Python's `re`: it must mean the same to both, so RE2's syntax is the one accepted.
    """
    import re2  # type: ignore[import-untyped]

    try:
        re.compile(pattern)
    except re.error as err:
        where = err.pos if err.pos is not None else len(pattern)
        return (
            f"{pattern!r} is not a regular expression: {err.msg} at character {where + 1} "
            f"({pattern[:where]}<here>{pattern[where:]}); escape a literal character with a "
            "backslash (\\. \\( \\[) or complete the construct"
        )
    options = re2.Options()
    options.log_errors = False
    try:
        re2.compile(pattern, options=options)
    except re2.error as err:
        reason = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else err
        return (
            f"{pattern!r} uses what the cluster's RE2 engine cannot match ({reason}); "
            "write it without look-arounds or back-references"
        )
    return None


class SignatureSettings(_Model):
    required: bool = Field(True, description="Every image must carry a valid Sigstore bundle.")
    trusted_root: str = Field(
        "production", description="production | staging | path to a trusted_root.json."
    )
    identities: list[SignerIdentity] = Field(
        default_factory=list, description="Signers trusted for this tenant's images."
    )


class BuilderSettings(_Model):
    id: str = Field(
        min_length=1, description="The SLSA builder.id the provenance must name exactly."
    )


class AttestationRequirement(_Model):
    type: str = Field(
        pattern=r"^https?://[^\s]+$",
        description="in-toto predicate type, e.g. https://cyclonedx.org/bom, "
        "https://cosign.sigstore.dev/attestation/vuln/v1, https://slsa.dev/provenance/v1.",
    )
    max_severity: Literal["NONE", "LOW", "MEDIUM", "HIGH", "CRITICAL"] | None = Field(
        None,
        description="Vulnerability scans (cosign vuln type) only: the worst finding allowed; "
        "UNKNOWN counts as CRITICAL.",
    )
    builder: BuilderSettings | None = Field(
        None, description="SLSA provenance only: the builder that must have built the image."
    )
    identities: list[SignerIdentity] = Field(
        default_factory=list,
        description="Who may sign this attestation (e.g. the SLSA builder's workflow); "
        "empty: images.signatures.identities.",
    )


class ImageSettings(_Model):
    allowed_registries: list[str] = Field(
        default_factory=list,
        description="Registry prefixes matched on whole path segments, e.g. ghcr.io/acme/.",
    )
    require_digest: bool = Field(True, description="Images must be pinned by @sha256 digest.")
    signatures: SignatureSettings = Field(default_factory=SignatureSettings)
    attestations: list[AttestationRequirement] = Field(
        default_factory=list,
        description="Signed in-toto attestations every image must carry (docs/supply-chain.md).",
    )


class ModelSettings(_Model):
    """Who may sign the models and datasets a step verifies (`verify_inputs=`, docs/supply-chain.md)."""

    signers: list[SignerIdentity] = Field(
        default_factory=list,
        description="Sigstore identities trusted to sign models (OpenSSF model-signing).",
    )
    keys: list[str] = Field(
        default_factory=list,
        description="PEM public keys (ECDSA P-256/P-384/P-521) trusted to sign models, inline.",
    )
    trusted_root: str | None = Field(
        None,
        description="production | staging | path to a trusted_root.json for the signers; "
        "absent: images.signatures.trustedRoot.",
    )

    @field_validator("keys")
    @classmethod
    def _public_keys(cls, keys: list[str]) -> list[str]:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        for index, pem in enumerate(keys):
            try:
                key = serialization.load_pem_public_key(pem.encode("ascii"))
            except (ValueError, TypeError, UnicodeEncodeError):
                raise ValueError(f"keys[{index}] is not a PEM public key") from None
            if not isinstance(key, ec.EllipticCurvePublicKey):
                raise ValueError(
                    f"keys[{index}] is not an ECDSA key (model-signing signs with P-256/384/521)"
                )
        return keys


_TEMPLATE_FIELDS = {"trustDomain", "namespace", "tenant", "pipeline", "step"}


class IdentitySettings(_Model):
    required: bool = Field(True, description="Steps must hold the expected SPIFFE ID.")
    trust_domain: str = Field(
        "cluster.local",
        pattern=r"^[a-z0-9._-]+$",
        description="SPIFFE trust domain of the cluster's SPIRE server.",
    )
    spiffe_id_template: str = Field(
        "spiffe://{trustDomain}/ns/{namespace}/pipeline/{pipeline}/step/{step}",
        description="SPIFFE ID per step; fields: trustDomain, namespace, tenant, pipeline, step.",
    )
    socket_path: str = Field(
        "/spiffe-workload-api/spire-agent.sock",
        pattern=r"^/",
        description="Workload API socket inside the pod (the SPIFFE CSI driver mounts it).",
    )
    pipeline_runners: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["system:serviceaccount:kubeflow:argo"],
        min_length=1,
        description=(
            "Usernames (request.userInfo.username) that may create a pod carrying a pipeline's "
            "identity labels: the pipeline runner (KFP's Argo workflow controller), never a person."
        ),
    )

    @model_validator(mode="after")
    def _template_fields(self) -> IdentitySettings:
        used = {name for _, name, _, _ in string.Formatter().parse(self.spiffe_id_template) if name}
        unknown = used - _TEMPLATE_FIELDS
        if unknown:
            raise ValueError(
                f"spiffeIdTemplate uses unknown field(s) {sorted(unknown)}; "
                f"allowed: {sorted(_TEMPLATE_FIELDS)}"
            )
        if not {"pipeline", "step"} <= used:
            raise ValueError("spiffeIdTemplate must contain {pipeline} and {step}: one ID per step")
        if not self.spiffe_id_template.startswith("spiffe://"):
            raise ValueError("spiffeIdTemplate must start with spiffe://")
        return self


class HardeningSettings(_Model):
    run_as_user: int = Field(1000, ge=1, description="Non-root UID for every step.")
    run_as_group: int = Field(1000, ge=1, description="Non-root GID for every step.")
    read_only_root_filesystem: bool = Field(
        True, description="Root filesystem read-only (set at admission; KFP cannot express it)."
    )
    scratch_mounts: list[Annotated[str, Field(pattern=r"^/")]] = Field(
        default_factory=lambda: ["/tmp"], description="Writable emptyDir mounts for each step."
    )
    data_mount_prefixes: list[Annotated[str, Field(pattern=r"^/")]] = Field(
        default_factory=lambda: ["/data"],
        description="Folders under which a step may mount data volumes (PVC, ConfigMap, Secret, "
        "image, emptyDir); none may be at, above or below a platform path.",
    )

    @model_validator(mode="after")
    def _mounts_clear_of_platform_paths(self) -> HardeningSettings:
        for name, paths in (
            ("scratchMounts", self.scratch_mounts),
            ("dataMountPrefixes", self.data_mount_prefixes),
        ):
            for path in paths:
                if contract.touches_platform_path(path):
                    raise ValueError(
                        f"{name} entry {path!r} is at, above or below a path the platform owns "
                        f"({', '.join(contract.PLATFORM_PATHS)})"
                    )
        return self


def _yaml_false_is_off(values: tuple[str, ...]) -> BeforeValidator:
    """YAML 1.1 reads an unquoted `off` (and `no`, `false`) as false: for a field with an `off`
    member that is the `off` the user wrote. True names no single value, so it is refused."""
    listed = ", ".join(repr(v) for v in values)

    def convert(value: Any) -> Any:
        if value is False:
            return "off"
        if value is True:
            raise ValueError(
                "YAML reads an unquoted on, yes or true as the boolean true, which is none of "
                f"this field's values; write one of {listed}"
            )
        return value

    return BeforeValidator(convert)


class ScrubSettings(_Model):
    before: bool = Field(True, description="Zero reachable GPU memory before the step runs.")
    after: bool = Field(True, description="Zero reachable GPU memory after the step.")
    verify: Annotated[
        Literal["off", "sample", "full"], _yaml_false_is_off(("off", "sample", "full"))
    ] = Field("sample", description="Read back zeroed memory: off, a sample, or all of it.")


class RuntimeSettings(_Model):
    allow_runtime_installs: bool = Field(
        False, description="Allow pip installs at step start (packages_to_install)."
    )
    shim: Annotated[Literal["off", "enforce"], _yaml_false_is_off(("off", "enforce"))] = Field(
        "enforce", description="Native quota shim on time-sliced GPUs."
    )
    scrub_on_free: bool = Field(True, description="The shim zeroes each block before freeing it.")
    cuda_firewall: Annotated[Literal["off", "enforce"], _yaml_false_is_off(("off", "enforce"))] = (
        Field(
            "enforce",
            description="The shim's CUDA firewall on time slices (timeslice-shim): refuse importing "
            "memory or events exported outside the step and peer access to devices outside it. "
            "off is refused for tiers confidential and restricted.",
        )
    )
    image: str | None = Field(
        None,
        description="The platform's runtime image, REGISTRY/REPOSITORY@sha256:<64 hex> (no tag): "
        "its init container copies the launcher and the shim into every step, so neither comes "
        "from the step's own image. Required for tiers confidential and restricted.",
    )

    @model_validator(mode="after")
    def _runtime_image_pinned(self) -> RuntimeSettings:
        if self.image is None:
            return self
        try:
            ref = ImageRef.parse(self.image)
        except SecuremlError as err:
            raise ValueError(f"image: {err.what}") from None
        if ref.digest is None or ref.tag is not None or ref.by_digest() != self.image:
            raise ValueError(
                f"image {self.image!r} must be written as REGISTRY/REPOSITORY@sha256:<64 hex> "
                "(registry named, no tag): admission compares it verbatim"
            )
        return self


class EgressRule(_Model):
    cidr: str = Field(description="Destination network, e.g. 10.0.0.0/8.")
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list, description="TCP ports; empty: all ports."
    )

    @model_validator(mode="after")
    def _valid_cidr(self) -> EgressRule:
        try:
            ipaddress.ip_network(self.cidr, strict=True)
        except ValueError as err:
            raise ValueError(f"cidr {self.cidr!r} is not a network address: {err}") from None
        return self


class NetworkSettings(_Model):
    egress: list[EgressRule] = Field(
        default_factory=list, description="Egress allowed beyond DNS, the KFP API and storage."
    )


class SchedulingSettings(_Model):
    """What a step pod may ask of the scheduler beyond the placement the compiler writes."""

    priority_class_names: list[Annotated[str, Field(pattern=_DNS_SUBDOMAIN)]] = Field(
        default_factory=list,
        description="PriorityClasses a step may name (priorityClassName); empty: none. List the "
        "cluster's globalDefault class here if it has one (the API server writes it into pods).",
    )
    scheduler_name: str = Field(
        "default-scheduler",
        pattern=_DNS_SUBDOMAIN,
        description="The only schedulerName a pod of the tenant may use.",
    )
    runtime_class_names: list[Annotated[str, Field(pattern=_DNS_SUBDOMAIN)]] = Field(
        default_factory=list,
        description="RuntimeClasses a pod may name (runtimeClassName); empty: none, the node's "
        "default runtime handler. A RuntimeClass picks the container runtime handler (one that "
        "runs the NVIDIA runtime in legacy mode would hand out GPUs past the device plugin).",
    )


class TrainerSettings(_Model):
    """Multi-node training through Kubeflow Trainer (docs/trainer.md); absent: forbidden."""

    max_nodes: int = Field(ge=1, le=1024, description="Most nodes (pods) one TrainJob may use.")
    max_gpus_per_node: int = Field(
        ge=0, le=64, description="Most whole GPUs each node may request (0: CPU-only training)."
    )
    allowed_runtimes: list[Annotated[str, Field(pattern=_DNS_SUBDOMAIN)]] = Field(
        min_length=1,
        description="ClusterTrainingRuntimes a step may name, e.g. torch-distributed; namespaced "
        "TrainingRuntimes are never allowed (the tenant could write their pod template).",
    )


class DoctorSettings(_Model):
    """The opt-in doctor DaemonSet: `secureml doctor node` on the tenant's GPU nodes (docs/bundle.md)."""

    image: str = Field(
        description="An image carrying secureml and its CLI (the runtime base image of `secureml "
        "image build-base runtime`), REGISTRY/REPOSITORY@sha256:<64 hex>."
    )
    namespace: str = Field(
        "secureml-system",
        pattern=_DNS_LABEL,
        description="The platform namespace the DaemonSet runs in (Pod Security privileged: it "
        "mounts host paths read-only); never a tenant's.",
    )
    interval_seconds: int = Field(
        300, ge=30, le=86400, description="Seconds between two checks of a node."
    )

    @model_validator(mode="after")
    def _image_pinned(self) -> DoctorSettings:
        try:
            ref = ImageRef.parse(self.image)
        except SecuremlError as err:
            raise ValueError(f"image: {err.what}") from None
        if ref.digest is None or ref.tag is not None or ref.by_digest() != self.image:
            raise ValueError(
                f"image {self.image!r} must be written as REGISTRY/REPOSITORY@sha256:<64 hex>"
            )
        return self


class MonitoringSettings(_Model):
    alerts: bool = Field(True, description="Render DCGM PrometheusRule alerts for the tenant.")
    doctor: DoctorSettings | None = Field(
        None,
        description="Opt in to a DaemonSet that runs `secureml doctor node` on the tenant's GPU "
        "nodes and logs a report every intervalSeconds; absent: none.",
    )


class Spec(_Model):
    namespace: str = Field(pattern=_DNS_LABEL, description="Kubernetes namespace of the tenant.")
    owner: Owner
    tier: Tier = Field(description="public | internal | confidential | restricted.")
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    identity: IdentitySettings = Field(default_factory=IdentitySettings)
    hardening: HardeningSettings = Field(default_factory=HardeningSettings)
    scrub: ScrubSettings = Field(default_factory=ScrubSettings)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    network: NetworkSettings = Field(default_factory=NetworkSettings)
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings)
    monitoring: MonitoringSettings = Field(default_factory=MonitoringSettings)
    models: ModelSettings = Field(default_factory=ModelSettings)
    trainer: TrainerSettings | None = Field(
        None, description="Multi-node TrainJobs (Kubeflow Trainer); absent: forbidden."
    )


class TenantProfile(_Model):
    """A tenant's rules for GPU pipelines, and the source of its admission bundle."""

    api_version: Literal["secureml.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["TenantProfile"]
    metadata: Metadata
    spec: Spec

    @classmethod
    def from_dict(
        cls, data: Any, *, source: str = "<profile>", loaded: LoadedYaml | None = None
    ) -> TenantProfile:
        """Validate `data`; raise ProfileError listing every problem with its YAML path.

        Field errors and contradictions come together: the contradictions are checked on the
        fields that parsed (secureml.profile.partial), skipping any check that reads a field
        that did not. `loaded` (from the YAML file) gives each problem its line and column.
        """
        written = _locations_by_path(loaded)
        if not isinstance(data, dict):
            raise _profile_error(
                source, [("(document)", "expected a TenantProfile mapping")], written
            )
        other = _another_kind(data)
        if other is not None:
            raise _profile_error(source, [("kind", other)], written)
        try:
            profile = cls.model_validate(data)
        except ValidationError as err:
            problems = [_field_problem(cls, e) for e in err.errors()]
            partial = parsed_part(cls, data, err.errors())
            if partial is not None:
                model, failed = partial
                assert isinstance(model, TenantProfile)
                problems += _contradictions(model, {_yaml_path(path) for path in failed})
            raise _profile_error(source, problems, written) from None
        problems = _contradictions(profile)
        if problems:
            raise _profile_error(source, problems, written)
        return profile

    def min_isolation(self) -> str:
        """The weakest isolation level (contract.ISOLATION_LEVELS) this tenant's tier allows."""
        return TIER_MIN_ISOLATION[self.spec.tier]

    def allows_isolation(self, level: str) -> bool:
        order = contract.ISOLATION_LEVELS
        return order.index(level) >= order.index(self.min_isolation())

    def timeslice_isolation(self) -> str:
        """The isolation of this tenant's time slices: `timeslice-shim` where the shim is enforced."""
        return (
            ISOLATION_TIMESLICE_SHIM if self.spec.runtime.shim == "enforce" else ISOLATION_TIMESLICE
        )

    def cuda_firewall(self) -> bool:
        """The shim's CUDA firewall is on for this tenant's time slices (limits `firewall=1`)."""
        return self.spec.runtime.shim == "enforce" and self.spec.runtime.cuda_firewall == "enforce"

    def spiffe_id(self, pipeline: str, step: str) -> str:
        """The SPIFFE ID a step must hold; pipeline and step as the pod labels spell them."""
        return self.spec.identity.spiffe_id_template.format(
            trustDomain=self.spec.identity.trust_domain,
            namespace=self.spec.namespace,
            tenant=self.metadata.name,
            pipeline=contract.label_value(pipeline),
            step=contract.label_value(step),
        )


def _yaml_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "/" in str(part) or "." in str(part):
            path += f"[{part!r}]" if path else str(part)
        else:
            path += f".{part}" if path else str(part)
    return path or "(document)"


def _field_problem(model: type[BaseModel], error: Any) -> tuple[str, str]:
    """One pydantic error as (YAML path, message), unknown fields with a did-you-mean."""
    loc = tuple(error["loc"])
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        hint = did_you_mean(model, loc)
        message = f"unknown field {loc[-1]} ({message})" + (f"; {hint}" if hint else "")
    return _yaml_path(loc), message


def _locations_by_path(loaded: LoadedYaml | None) -> dict[str, tuple[int, int]]:
    """Line and column of every path the YAML wrote, keyed as the problems name them."""
    if loaded is None:
        return {}
    return {_yaml_path(loc): place for loc, place in loaded.locations.items()}


def _profile_error(
    source: str, problems: list[tuple[str, str]], written: dict[str, tuple[int, int]]
) -> ProfileError:
    located = {path: _locate(path, written) for path, _ in problems}
    return ProfileError(
        source, problems, {path: place for path, place in located.items() if place is not None}
    )


def _locate(path: str, locations: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    """Where `path` was written, or its nearest written ancestor (a missing field's parent)."""
    while path:
        if path in locations:
            return locations[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return locations.get("(document)")


_Parsed = Callable[..., bool]


def _parsed(failed: set[str] | frozenset[str]) -> _Parsed:
    """`ok(*inputs)`: none of the inputs, nor a field inside one, is in `failed`."""

    def ok(*inputs: str) -> bool:
        return not any(
            i == f or i.startswith(f + ".") or i.startswith(f + "[") for i in inputs for f in failed
        )

    return ok


def _contradictions(
    profile: TenantProfile, failed: set[str] | frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """Rules that span fields: the tier's minimum isolation against what the GPU section offers.

    `failed` names fields that did not parse (their value here is a default or a placeholder):
    a check that reads one of them, or a field inside one, is skipped.
    """
    ok = _parsed(failed)
    problems = _tier_gpu_problems(profile, ok)
    if ok("spec.gpu.mig.allowedProfiles", "spec.gpu.models"):
        problems += _mig_profiles_on_models(profile.spec.gpu)
    problems += _quota_problems(profile, ok)
    problems += _mig_strategy_problems(profile, ok)
    doctor = profile.spec.monitoring.doctor
    if ok("spec.namespace", "spec.monitoring.doctor") and doctor is not None:
        if doctor.namespace == profile.spec.namespace:
            problems.append(
                (
                    "spec.monitoring.doctor.namespace",
                    "the doctor DaemonSet mounts host paths: run it in the platform namespace "
                    "(default secureml-system), never the tenant's",
                )
            )
    if ok(_TIER, "spec.gpu.confidentialComputing", "spec.gpu.models"):
        from secureml.profile.confidential import confidential_problems

        problems += confidential_problems(
            profile.spec.tier,
            profile.spec.gpu.confidential_computing,
            list(profile.spec.gpu.models),
        )
    strict = ok(_TIER) and profile.spec.tier in ("confidential", "restricted")
    problems += _image_problems(profile, ok, strict)
    if strict:
        problems += _strict_tier_problems(profile, ok)
    return problems


def _tier_gpu_problems(profile: TenantProfile, ok: _Parsed) -> list[tuple[str, str]]:
    """The GPU kinds the profile offers against the weakest isolation its tier allows."""
    gpu = profile.spec.gpu
    problems: list[tuple[str, str]] = []
    allows = profile.allows_isolation
    tier = profile.spec.tier
    if ok(_TIER, "spec.gpu.timeSlice", "spec.runtime.shim") and gpu.time_slice is not None:
        level = profile.timeslice_isolation()
        if not allows(level):
            why = (
                "runtime.shim is off, so time-sliced steps would have no limits"
                if allows("timeslice-shim")
                else "time-sliced GPUs share memory and faults between tenants"
            )
            problems.append(
                (
                    "spec.gpu.timeSlice",
                    f"tier {tier} needs isolation {profile.min_isolation()} or better; {why}; "
                    "remove timeSlice"
                    + (" or set runtime.shim: enforce" if allows("timeslice-shim") else ""),
                )
            )
    if (
        ok(_TIER, "spec.gpu.mig.allowedProfiles")
        and gpu.mig is not None
        and gpu.mig.allowed_profiles
        and not allows("mig")
    ):
        problems.append(
            (
                "spec.gpu.mig",
                f"tier {tier} needs dedicated whole GPUs; MIG slices share the PCIe link and "
                "driver; remove mig",
            )
        )
    if ok(_TIER, "spec.gpu.wholeGpu") and tier == "restricted" and gpu.whole_gpu is None:
        problems.append(
            (
                "spec.gpu.wholeGpu",
                "tier restricted runs only on dedicated whole GPUs; "
                "add wholeGpu with the dedicated pool's nodeSelector and tolerations",
            )
        )
    whole_inputs = ok(_TIER, "spec.gpu.wholeGpu.nodeSelector")
    if whole_inputs and gpu.whole_gpu is not None and tier in ("confidential", "restricted"):
        if not gpu.whole_gpu.node_selector:
            problems.append(
                (
                    "spec.gpu.wholeGpu.nodeSelector",
                    f"tier {tier} needs whole GPUs on a dedicated pool; give its node labels",
                )
            )
    return problems


def _quota_problems(profile: TenantProfile, ok: _Parsed) -> list[tuple[str, str]]:
    """Each quota names a GPU resource the profile allows, and is not negative."""
    gpu = profile.spec.gpu
    problems: list[tuple[str, str]] = []
    quota_inputs = (
        "spec.gpu.quota",
        "spec.gpu.mig.allowedProfiles",
        "spec.gpu.timeSlice.resourceName",
        "spec.gpu.wholeGpu",
        "spec.gpu.migStrategy",
    )
    allowed_mig = set(gpu.mig.allowed_profiles) if gpu.mig else set()
    shared = gpu.time_slice.resource_name if gpu.time_slice else None
    for resource in gpu.quota if ok(*quota_inputs) else ():
        path = f"spec.gpu.quota[{resource!r}]"
        if resource.startswith(MIG_RESOURCE_PREFIX):
            mig_profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
            if mig_profile not in allowed_mig:
                problems.append(
                    (
                        path,
                        f"quota on MIG profile {mig_profile} which gpu.mig.allowedProfiles "
                        "does not allow; add it there or remove the quota",
                    )
                )
        elif resource == RESOURCE_GPU:
            single_mig = gpu.mig_strategy == "single" and allowed_mig
            if gpu.whole_gpu is None and not single_mig:
                problems.append((path, "quota on whole GPUs but gpu.wholeGpu is absent"))
        elif resource == shared:
            continue
        elif resource.startswith(NVIDIA_RESOURCE_PREFIX):
            problems.append((path, f"{resource} is not a GPU resource this profile allows"))
        if gpu.quota[resource] < 0:
            problems.append((path, "quota must not be negative"))
    return problems


def _mig_strategy_problems(profile: TenantProfile, ok: _Parsed) -> list[tuple[str, str]]:
    """MIG strategy single offers one profile per node: the profile lists one at most."""
    gpu = profile.spec.gpu
    allowed_mig = set(gpu.mig.allowed_profiles) if gpu.mig else set()
    problems: list[tuple[str, str]] = []
    single_inputs = ok("spec.gpu.backend", "spec.gpu.migStrategy", "spec.gpu.mig.allowedProfiles")
    if (
        single_inputs
        and gpu.backend == "device-plugin"
        and gpu.mig_strategy == "single"
        and len(allowed_mig) > 1
    ):
        problems.append(
            (
                "spec.gpu.mig.allowedProfiles",
                "migStrategy single exposes one MIG profile per node as nvidia.com/gpu; "
                "steps can still choose among profiles only through node selectors, which "
                "secureml sets per product — keep one profile or use migStrategy mixed",
            )
        )
    return problems


def _image_problems(profile: TenantProfile, ok: _Parsed, strict: bool) -> list[tuple[str, str]]:
    """Pinned and signed images where the tier needs them, signers to check, usable registries."""
    tier = profile.spec.tier
    problems: list[tuple[str, str]] = []
    images = profile.spec.images
    if strict and ok("spec.images.requireDigest") and not images.require_digest:
        problems.append(("spec.images.requireDigest", f"tier {tier} requires digest-pinned images"))
    if strict and ok("spec.images.signatures.required") and not images.signatures.required:
        problems.append(("spec.images.signatures.required", f"tier {tier} requires signed images"))
    signer_inputs = ok("spec.images.signatures.required", "spec.images.signatures.identities")
    if signer_inputs and images.signatures.required and not images.signatures.identities:
        problems.append(
            (
                "spec.images.signatures.identities",
                "signatures are required but no trusted signer is listed; add an issuer and "
                "subject or subjectRegExp",
            )
        )
    if ok("spec.images.attestations", "spec.images.signatures.identities"):
        from secureml.profile.attestations import attestation_problems

        problems += attestation_problems(images.attestations, images.signatures.identities)
    from secureml.core.image_ref import allowed_registry_problem

    registries_ok = ok("spec.images.allowedRegistries")
    for index, entry in enumerate(images.allowed_registries if registries_ok else ()):
        problem = allowed_registry_problem(entry)
        if problem:
            problems.append((f"spec.images.allowedRegistries[{index}]", problem))
    if registries_ok and not images.allowed_registries:
        problems.append(
            (
                "spec.images.allowedRegistries",
                "list at least one registry prefix, e.g. ghcr.io/acme/",
            )
        )
    return problems


def _strict_tier_problems(profile: TenantProfile, ok: _Parsed) -> list[tuple[str, str]]:
    """What the confidential and restricted tiers require beyond images."""
    spec = profile.spec
    tier = spec.tier
    problems: list[tuple[str, str]] = []
    if ok("spec.identity.required") and not spec.identity.required:
        problems.append(("spec.identity.required", f"tier {tier} requires workload identity"))
    read_only_ok = ok("spec.hardening.readOnlyRootFilesystem")
    if read_only_ok and not spec.hardening.read_only_root_filesystem:
        problems.append(
            ("spec.hardening.readOnlyRootFilesystem", f"tier {tier} requires a read-only root")
        )
    if ok("spec.runtime.image") and spec.runtime.image is None:
        problems.append(
            (
                "spec.runtime.image",
                f"tier {tier} needs the platform's runtime image: without it the launcher and the "
                "shim are the step image's own; set runtime.image: REGISTRY/REPOSITORY@sha256:...",
            )
        )
    if ok("spec.runtime.cudaFirewall") and spec.runtime.cuda_firewall != "enforce":
        problems.append(
            (
                "spec.runtime.cudaFirewall",
                f"tier {tier} requires the CUDA firewall: set runtime.cudaFirewall: enforce",
            )
        )
    if ok("spec.runtime.allowRuntimeInstalls") and spec.runtime.allow_runtime_installs:
        problems.append(
            ("spec.runtime.allowRuntimeInstalls", f"tier {tier} forbids installs at run time")
        )
    scrub_ok = ok("spec.scrub.before", "spec.scrub.after")
    if scrub_ok and not (spec.scrub.before and spec.scrub.after):
        problems.append(("spec.scrub", f"tier {tier} requires scrubbing before and after a step"))
    if ok("spec.network.egress"):
        from secureml.profile.network import egress_problems

        problems += egress_problems(spec.network.egress, tier)
    return problems


def read_profile_bytes(path: str | Path) -> bytes:
    """The profile file's exact bytes (what a signature covers), with a clear error if unreadable."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InputError(
            f"cannot read profile {path}",
            why=err.strerror or str(err),
            fix="pass the path of a TenantProfile YAML file",
        ) from None


def _mig_profiles_on_models(gpu: GpuSettings) -> list[tuple[str, str]]:
    """Every allowed MIG profile must exist on at least one of the tenant's GPU models."""

    if gpu.mig is None or not gpu.mig.allowed_profiles:
        return []
    if not gpu.models:
        return [
            (
                "spec.gpu.models",
                "MIG profiles are allowed but no GPU model is listed; "
                f"name the models of the tenant's pools ({', '.join(MIG_CATALOGUE)})",
            )
        ]
    problems = []
    for index, name in enumerate(gpu.mig.allowed_profiles):
        if not models_offering(name, gpu.models):
            offered_by = [m.name for m in MIG_CATALOGUE.values() if name in m.profiles]
            hint = f"it exists on {', '.join(offered_by)}" if offered_by else "no GPU model has it"
            problems.append(
                (
                    f"spec.gpu.mig.allowedProfiles[{index}]",
                    f"MIG profile {name} is not offered by {', '.join(gpu.models)}; {hint}",
                )
            )
    return problems


def load_profile(path: str | Path) -> TenantProfile:
    """Read and validate a TenantProfile YAML file."""
    return parse_profile(read_profile_bytes(path), source=str(path))


def parse_profile(content: bytes, *, source: str) -> TenantProfile:
    """Validate a TenantProfile from the YAML bytes read from `source`."""
    import yaml

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            "profile is not UTF-8 text", why=str(err), fix="save the file as UTF-8", where=source
        ) from None
    try:
        loaded = load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise InputError(
            "profile is not valid YAML",
            why=str(getattr(err, "problem", err)),
            fix="fix the YAML syntax at the position shown",
            where=where,
        ) from None
    if loaded.duplicates:  # which of two values was meant is unknown: nothing else is checked
        written = {_yaml_path(path): place for path, _, place in loaded.duplicates}
        raise ProfileError(
            source, [(_yaml_path(path), message) for path, message, _ in loaded.duplicates], written
        )
    return TenantProfile.from_dict(loaded.data, source=source, loaded=loaded)


def profile_json_schema() -> dict[str, Any]:
    """The JSON Schema of TenantProfile, for editors (`profiles/tenantprofile.schema.json`)."""
    schema = TenantProfile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "TenantProfile"
    return schema
