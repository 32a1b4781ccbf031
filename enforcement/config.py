"""The launcher's configuration: read once from `SECUREML_*` variables, checked, then immutable.

The compiler (secureml/compiler) writes these variables into every secure task; in a cluster the
step's code cannot change them before the launcher reads them, and admission pins each value to the
profile and the pod's labels (`secureml.launcherEnv`). Where the mutating policy mounts the pod's
labels and annotations (`contract.PODINFO_LABELS`, `PODINFO_ANNOTATIONS`), the pod-level settings
(isolation, tenant, step, GPU request, expected SPIFFE ID) come from those read-only files and an
environment that disagrees stops the launcher.
Every name lives in `secureml.core.contract`; docs/launcher.md lists them with their defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from secureml.core import contract
from secureml.core.contract import ISOLATION_TIMESLICE_SHIM
from secureml.core.errors import SecuremlError
from secureml.gpu.request import (
    GPURequest,
    GPURequestError,
    TimeSlice,
    decode_gpu_request,
)
from secureml.supplychain.verify_inputs import VerifiedInput
from secureml.supplychain.verify_inputs import from_json as verify_inputs_from_json

from .podinfo import PodInfo, PodInfoError, read_podinfo
from .trainer_node import node_spiffe_id

ScrubVerify = Literal["off", "sample", "full"]
ShimMode = Literal["off", "enforce"]
SCRUB_VERIFY_MODES: tuple[ScrubVerify, ...] = ("off", "sample", "full")
SHIM_MODES: tuple[ShimMode, ...] = ("off", "enforce")

DEFAULT_IDENTITY_TIMEOUT_S = 10.0
DEFAULT_WATCHDOG_INTERVAL_S = 0.5
DEFAULT_WATCHDOG_GRACE_S = 10.0


class ConfigError(SecuremlError):
    """A `SECUREML_*` variable is missing, malformed or contradicts another."""


# --- the launcher configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class LauncherConfig:
    """Everything the launcher's stages need, from the environment of the launcher process."""

    tenant: str
    namespace: str
    pipeline: str
    step: str
    image: str
    isolation: str
    gpu_request: GPURequest | None
    expected_spiffe_id: str
    identity_required: bool
    spiffe_socket: str
    identity_timeout_s: float
    identity_dir: Path | None
    scrub_before: bool
    scrub_after: bool
    scrub_verify: ScrubVerify
    shim_mode: ShimMode
    shim_limits_file: Path
    confidential_computing: bool
    watchdog_interval_s: float
    watchdog_grace_s: float
    audit_dir: Path | None
    verify_inputs: tuple[VerifiedInput, ...] = ()  # inputs whose model signature must verify
    model_trust: str = ""  # the profile's model trust (secureml.supplychain.model_trust JSON)

    @property
    def uses_gpu(self) -> bool:
        """GPU stages run only for a step with a GPU request and an isolation other than "none"."""
        return self.gpu_request is not None and self.isolation != contract.ISOLATION_NONE

    @property
    def shim_required(self) -> bool:
        """The shim is required on a time-sliced GPU when the profile enforces it."""
        return isinstance(self.gpu_request, TimeSlice) and (
            self.shim_mode == "enforce" or self.isolation == ISOLATION_TIMESLICE_SHIM
        )

    @property
    def image_digest(self) -> str:
        """`sha256:<hex>` from a digest-pinned image reference, or "" when it is not pinned."""
        _, _, digest = self.image.partition("@")
        return digest


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}", where=name)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(name) or default
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}", where=name)
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{name} must be a positive number of seconds, got {raw!r}", where=name)
    return value


# Settings the pod's own metadata decides: (variable, "labels" | "annotations", key).
PODINFO_SETTINGS = (
    (contract.ENV_ISOLATION, "labels", contract.LABEL_ISOLATION),
    (contract.ENV_TENANT, "labels", contract.LABEL_TENANT),
    (contract.ENV_STEP, "labels", contract.LABEL_STEP),
    (contract.ENV_GPU_REQUEST, "annotations", contract.ANNOTATION_GPU_REQUEST),
    (contract.ENV_EXPECTED_SPIFFE_ID, "annotations", contract.ANNOTATION_SPIFFE_ID),
    (contract.ENV_VERIFY_INPUTS, "annotations", contract.ANNOTATION_VERIFY_INPUTS),
    (
        contract.ENV_CONFIDENTIAL_COMPUTING,
        "annotations",
        contract.ANNOTATION_CONFIDENTIAL_COMPUTING,
    ),
)


def settle_with_podinfo(env: Mapping[str, str], podinfo: PodInfo) -> dict[str, str]:
    """`env` with the pod-level settings taken from the podinfo files, where they are present.

    A variable that the environment sets to something else than the pod's metadata says (or sets
    where the metadata has no such key) is a conflict: `ConfigError`, the launcher stops. Without
    podinfo files (no mutating policy, a local run) the environment is used as it is.
    """
    settled = dict(env)
    if not podinfo.present:
        return settled
    for name, source, key in PODINFO_SETTINGS:
        metadata = podinfo.labels if source == "labels" else podinfo.annotations
        from_env = env.get(name) or ""
        from_pod = metadata.get(key)
        if from_pod is None:
            if from_env:
                raise ConfigError(
                    f"{name} is set to {from_env!r} but the pod has no {source[:-1]} {key}",
                    why="the launcher's pod-level settings come from the pod's own metadata",
                    fix="recompile the pipeline with `secureml compile`; do not set SECUREML_* by hand",
                    where=f"{contract.PODINFO_DIR} ({source})",
                )
            continue
        if from_env and from_env != from_pod:
            raise ConfigError(
                f"{name}={from_env!r} conflicts with the pod's {source[:-1]} {key}={from_pod!r}",
                why="the launcher's pod-level settings come from the pod's own metadata, which the "
                "step cannot write; an environment that disagrees was set by hand",
                fix="recompile the pipeline with `secureml compile`; do not set SECUREML_* by hand",
                where=f"{contract.PODINFO_DIR} ({source})",
            )
        settled[name] = from_pod
    return settled


def _confidential(env: Mapping[str, str]) -> bool:
    """`required` (the profile's gpu.confidentialComputing) or unset/`off`; anything else stops."""
    value = env.get(contract.ENV_CONFIDENTIAL_COMPUTING) or "off"
    if value not in (contract.CONFIDENTIAL_COMPUTING_REQUIRED, "off"):
        raise ConfigError(
            f"{contract.ENV_CONFIDENTIAL_COMPUTING} must be required or off, got {value!r}",
            where=contract.ENV_CONFIDENTIAL_COMPUTING,
        )
    return value == contract.CONFIDENTIAL_COMPUTING_REQUIRED


def _verify_inputs(env: Mapping[str, str]) -> tuple[VerifiedInput, ...]:
    """The inputs to verify (`secureml.supplychain.verify_inputs` JSON), or `ConfigError`."""
    raw = env.get(contract.ENV_VERIFY_INPUTS) or ""
    if not raw:
        return ()
    try:
        return verify_inputs_from_json(raw)
    except ValueError as err:
        raise ConfigError(
            f"{contract.ENV_VERIFY_INPUTS} is malformed: {err}",
            fix="recompile the pipeline with `secureml compile`",
            where=contract.ENV_VERIFY_INPUTS,
        ) from None


def _gpu_request(text: str) -> GPURequest:
    """The compiler's GPU request (`secureml.gpu.request`'s JSON), or `ConfigError`."""
    try:
        return decode_gpu_request(text, where=contract.ENV_GPU_REQUEST)
    except GPURequestError as err:
        raise ConfigError(err.what, why=err.why, fix=err.fix, where=err.where) from None


def load_config(
    env: Mapping[str, str] | None = None, podinfo_dir: Path = Path(contract.PODINFO_DIR)
) -> LauncherConfig:
    """Read and check the launcher's configuration; raise `ConfigError` on the first problem.

    The pod-level settings come from the read-only podinfo files under `podinfo_dir` where the
    mutating policy mounts them (`settle_with_podinfo`); everything else from `env`. The folder is
    a parameter for tests only: no variable can move it.
    """
    try:
        podinfo = read_podinfo(podinfo_dir)
    except PodInfoError as err:
        raise ConfigError(err.what, why=err.why, fix=err.fix, where=err.where) from None
    env = settle_with_podinfo(os.environ if env is None else env, podinfo)
    isolation = env.get(contract.ENV_ISOLATION) or ""
    known = (*contract.ISOLATION_LEVELS, contract.ISOLATION_NONE)
    raw_request = env.get(contract.ENV_GPU_REQUEST) or ""
    if isolation and isolation not in known:
        raise ConfigError(
            f"{contract.ENV_ISOLATION} must be one of {', '.join(known)}, got {isolation!r}",
            where=contract.ENV_ISOLATION,
        )
    gpu_request = _gpu_request(raw_request) if raw_request else None
    if not isolation:
        isolation = contract.ISOLATION_NONE if gpu_request is None else ""
    if not isolation:
        raise ConfigError(
            f"{contract.ENV_GPU_REQUEST} is set but {contract.ENV_ISOLATION} is not",
            why="the isolation level decides which GPU checks are required",
            fix="recompile the pipeline with `secureml compile`",
            where=contract.ENV_ISOLATION,
        )
    if isolation != contract.ISOLATION_NONE and gpu_request is None:
        raise ConfigError(
            f"{contract.ENV_ISOLATION}={isolation} but {contract.ENV_GPU_REQUEST} is not set",
            why="without the request the launcher cannot check that the GPU is the one asked for",
            fix="recompile the pipeline with `secureml compile`",
            where=contract.ENV_GPU_REQUEST,
        )
    identity_required = _flag(env, contract.ENV_IDENTITY_REQUIRED, False)
    try:
        expected_spiffe_id = node_spiffe_id(
            env.get(contract.ENV_EXPECTED_SPIFFE_ID) or "", env, podinfo
        )
    except SecuremlError as err:
        raise ConfigError(err.what, why=err.why, fix=err.fix, where=err.where) from None
    if identity_required and not expected_spiffe_id:
        raise ConfigError(
            f"{contract.ENV_IDENTITY_REQUIRED}=true but {contract.ENV_EXPECTED_SPIFFE_ID} is empty",
            why="an identity cannot be checked without the SPIFFE ID it must equal",
            fix="recompile the pipeline with `secureml compile`",
            where=contract.ENV_EXPECTED_SPIFFE_ID,
        )
    shim_mode = _choice(env, contract.ENV_SHIM_MODE, SHIM_MODES, "off")
    identity_dir = env.get(contract.ENV_IDENTITY_DIR)
    audit_dir = env.get(contract.ENV_AUDIT_DIR)
    return LauncherConfig(
        tenant=env.get(contract.ENV_TENANT, ""),
        namespace=env.get(contract.ENV_NAMESPACE, ""),
        pipeline=env.get(contract.ENV_PIPELINE, ""),
        step=env.get(contract.ENV_STEP, ""),
        image=env.get(contract.ENV_IMAGE, ""),
        isolation=isolation,
        gpu_request=gpu_request,
        expected_spiffe_id=expected_spiffe_id,
        identity_required=identity_required,
        spiffe_socket=env.get(contract.SPIFFE_SOCKET_ENV, ""),
        identity_timeout_s=_seconds(env, contract.ENV_IDENTITY_TIMEOUT, DEFAULT_IDENTITY_TIMEOUT_S),
        identity_dir=Path(identity_dir) if identity_dir else None,
        scrub_before=_flag(env, contract.ENV_SCRUB_BEFORE, False),
        scrub_after=_flag(env, contract.ENV_SCRUB_AFTER, False),
        scrub_verify=_choice(env, contract.ENV_SCRUB_VERIFY, SCRUB_VERIFY_MODES, "off"),  # type: ignore[arg-type]
        shim_mode=shim_mode,  # type: ignore[arg-type]
        shim_limits_file=Path(env.get(contract.ENV_SHIM_LIMITS_FILE) or contract.SHIM_LIMITS_PATH),
        confidential_computing=_confidential(env),
        watchdog_interval_s=_seconds(
            env, contract.ENV_WATCHDOG_INTERVAL, DEFAULT_WATCHDOG_INTERVAL_S
        ),
        watchdog_grace_s=_seconds(env, contract.ENV_WATCHDOG_GRACE, DEFAULT_WATCHDOG_GRACE_S),
        audit_dir=Path(audit_dir) if audit_dir else None,
        verify_inputs=_verify_inputs(env),
        model_trust=env.get(contract.ENV_MODEL_TRUST) or "",
    )


# --- the shim limits file (grammar: docs/shim.md; the shim's own parser is the authority) ----------


@dataclass(frozen=True)
class ShimLimits:
    """What the shim will enforce: bytes per device, percent of compute, scrub freed memory, and
    whether its CUDA firewall refuses imports and peers from outside the step."""

    memory: int
    compute: int
    scrub_on_free: bool
    firewall: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "memory": self.memory,
            "compute": self.compute,
            "scrub_on_free": self.scrub_on_free,
            "firewall": self.firewall,
        }


_LIMIT_KEYS = ("version", "memory", "compute", "scrub_on_free", "firewall")


def read_shim_limits(path: Path) -> ShimLimits:
    """Read the limits file the shim will use; `ConfigError` naming the line when it is unusable."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"cannot read the shim limits file: {err.strerror or err}",
            why="a time-sliced step's limits must come from a file the step cannot rewrite",
            fix="in a cluster, apply the tenant bundle (its mutating policy mounts the pod's "
            f"limits annotation at {contract.SHIM_LIMITS_PATH}); locally, use `secureml run --local`",
            where=where,
        ) from None
    values: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = (part.strip() for part in line.partition("="))
        if not sep or key not in _LIMIT_KEYS or key in values or not value.isdigit():
            raise ConfigError(
                f"line {number} is not one of {', '.join(_LIMIT_KEYS)} = <decimal>, once each: {raw!r}",
                where=where,
            )
        values[key] = int(value)
    if values.get("version") != 1 or "memory" not in values:
        raise ConfigError("the shim limits file needs version=1 and memory=<bytes>", where=where)
    limits = ShimLimits(
        memory=values["memory"],
        compute=values.get("compute", 100),
        scrub_on_free=bool(values.get("scrub_on_free", 1)),
        firewall=bool(values.get("firewall", 0)),
    )
    flags_ok = values.get("scrub_on_free", 1) <= 1 and values.get("firewall", 0) <= 1
    if not 1 <= limits.compute <= 100 or not flags_ok:
        raise ConfigError("compute must be 1..100, scrub_on_free and firewall 0 or 1", where=where)
    return limits
