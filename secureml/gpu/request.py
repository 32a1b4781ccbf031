"""The GPU request (`MIG`, `TimeSlice`, `WholeGPU`): one value from the decorator to the launcher.

The launcher imports it at start: standard library and secureml's light modules only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from secureml.core.errors import SecuremlError
from secureml.core.quantity import format_bytes, parse_bytes
from secureml.nvidia.mig_names import MIG_PROFILE_NAME, mig_memory_gb

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

# The members of each kind's JSON after "kind", in the order `to_json` writes them.
WIRE_FIELDS: dict[str, tuple[str, ...]] = {
    "mig": ("profile", "count"),
    "timeslice": ("memory", "compute"),
    "whole": ("count", "product"),
}
MIN_TIMESLICE_MEMORY = 2**20  # 1Mi: below it no CUDA context fits; a smaller value is a typo


class GPURequestError(SecuremlError):
    """A GPU request that is malformed: as written in a component, or as decoded from JSON."""


def _positive_int(value: object, what: str, where: str, upper: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < 1
        or (upper is not None and value > upper)
    ):
        bounds = f"from 1 to {upper}" if upper is not None else ">= 1"
        raise GPURequestError(
            f"{what} {value!r} must be a whole number {bounds}",
            fix=f"set {what}=1 or more",
            where=where,
        )
    return value


def _compact_json(kind: str, values: Mapping[str, object]) -> str:
    return json.dumps(
        {"kind": kind, **{name: values[name] for name in WIRE_FIELDS[kind]}}, separators=(",", ":")
    )


@dataclass(frozen=True, slots=True)
class MIG:
    """`count` MIG instances of `profile` (e.g. "1g.10gb"); isolation level `mig`."""

    profile: str
    count: int = 1
    kind: Literal["mig"] = field(default="mig", init=False)

    def __post_init__(self) -> None:
        where = f"MIG({self.profile!r})"
        if not isinstance(self.profile, str) or not MIG_PROFILE_NAME.fullmatch(self.profile):
            raise GPURequestError(
                f"{self.profile!r} is not a MIG profile name",
                why="MIG profiles are named <compute>g.<memory>gb, e.g. 1g.10gb or 3g.40gb",
                fix="pick one of the profiles your TenantProfile allows (spec.gpu.mig.allowedProfiles)",
                where=where,
            )
        _positive_int(self.count, "count", where)

    @property
    def memory_gb(self) -> int:
        """The memory the profile name promises, in GB: `1g.10gb` -> 10."""
        return mig_memory_gb(self.profile)

    def isolation(self, profile: TenantProfile) -> str:
        return "mig"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "profile": self.profile, "count": self.count}

    def to_json(self) -> str:
        return _compact_json(self.kind, self.to_dict())

    def describe(self) -> str:
        return f"MIG {self.profile} x{self.count}"


@dataclass(frozen=True, slots=True)
class TimeSlice:
    """A share of a time-sliced GPU: at most `memory` ("8Gi"; bytes once decoded) and `compute`
    percent of the SMs. Isolation `timeslice-shim` when the profile arms the shim, else `timeslice`.

    `memory` holds bytes after construction; `memory_as_written` keeps what the component wrote,
    for `check_as_written` (the decorator's check, which can name the component).
    """

    memory: int
    compute: int
    kind: Literal["timeslice"] = field(default="timeslice", init=False)
    memory_as_written: str = field(default="", init=False, compare=False, repr=False)

    if TYPE_CHECKING:  # the generated __init__ takes memory as written: bytes or a quantity

        def __init__(self, memory: int | str, compute: int) -> None: ...

    def __post_init__(self) -> None:
        where = "TimeSlice(...)"
        written: object = self.memory
        try:
            memory = parse_bytes(written)
        except ValueError as err:
            raise GPURequestError(
                f"memory {written!r} is not a size",
                why=str(err),
                fix="write e.g. memory='8Gi'",
                where=where,
            ) from None
        object.__setattr__(self, "memory", memory)
        object.__setattr__(self, "memory_as_written", str(written).strip())
        _positive_int(self.compute, "compute", where, upper=100)

    @property
    def memory_bytes(self) -> int:
        return self.memory

    def check_as_written(self, where: str) -> None:
        """Refuse a memory without a unit (`memory=8` is 8 bytes, never what was meant) or below
        1Mi. Run where the component is known, so the error can name it."""
        written = self.memory_as_written
        if written.isdigit():
            meant = format_bytes(self.memory)  # 8589934592 -> 8Gi; 8 -> 8Gi (a guess)
            if self.memory < MIN_TIMESLICE_MEMORY or meant.isdigit():
                meant = f"{written}Gi"
            raise GPURequestError(
                f"TimeSlice memory={written} has no unit, so it means {written} bytes",
                why="GPU memory is written as a Kubernetes quantity; a bare number is almost "
                "always a size in Gi or Mi missing its unit",
                fix=f"write the unit, e.g. TimeSlice(memory={meant!r}, compute={self.compute})",
                where=where,
            )
        if self.memory < MIN_TIMESLICE_MEMORY:
            raise GPURequestError(
                f"TimeSlice memory={written} is {self.memory} bytes, less than 1Mi",
                why="no CUDA context fits in less than a mebibyte of GPU memory",
                fix="ask for a realistic share, e.g. memory='8Gi'",
                where=where,
            )

    def isolation(self, profile: TenantProfile) -> str:
        return profile.timeslice_isolation()

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "memory": self.memory, "compute": self.compute}

    def to_json(self) -> str:
        return _compact_json(self.kind, self.to_dict())

    def describe(self) -> str:
        return f"time-slice {format_bytes(self.memory)}/{self.compute}%"


@dataclass(frozen=True, slots=True)
class WholeGPU:
    """`count` whole GPUs on the tenant's dedicated pool, optionally of one GFD `product`."""

    count: int = 1
    product: str | None = None
    kind: Literal["whole"] = field(default="whole", init=False)

    def __post_init__(self) -> None:
        where = "WholeGPU(...)"
        _positive_int(self.count, "count", where)
        if self.product is not None and (
            not isinstance(self.product, str)
            or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.product)
        ):
            raise GPURequestError(
                f"product {self.product!r} is not a GPU product name",
                why="the product is matched against the node label nvidia.com/gpu.product",
                fix="use the label value, e.g. product='NVIDIA-H100-80GB-HBM3', or leave it out",
                where=where,
            )

    def isolation(self, profile: TenantProfile) -> str:
        return "dedicated"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "count": self.count, "product": self.product}

    def to_json(self) -> str:
        return _compact_json(self.kind, self.to_dict())

    def describe(self) -> str:
        return f"whole x{self.count}" + (f" ({self.product})" if self.product else "")


GPURequest = MIG | TimeSlice | WholeGPU


# --- decoding ------------------------------------------------------------------------------------

_OPTIONAL = {"mig": {"count"}, "whole": {"product"}}  # members a reader may do without
_RECOMPILE = "recompile the pipeline with `secureml compile`; do not edit the request by hand"


def gpu_request_from_dict(data: object, *, where: str) -> GPURequest:
    """The request a `to_dict()` mapping describes; `GPURequestError` naming what is wrong.

    Strict: every member of the kind and no other (the admission rules match the exact JSON, and
    a reader must not accept what they would not).
    """
    if not isinstance(data, dict):
        raise GPURequestError("a GPU request must be a JSON object", fix=_RECOMPILE, where=where)
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in WIRE_FIELDS:
        raise GPURequestError(
            f"GPU request kind must be one of {sorted(WIRE_FIELDS)}, got {kind!r}",
            fix=_RECOMPILE,
            where=where,
        )
    allowed = {"kind", *WIRE_FIELDS[kind]}
    unknown = sorted(set(data) - allowed)
    missing = sorted(set(WIRE_FIELDS[kind]) - set(data) - _OPTIONAL.get(kind, set()))
    if unknown or missing:
        problem = f"unknown field(s) {unknown}" if unknown else f"no field(s) {missing}"
        raise GPURequestError(
            f"GPU request of kind {kind!r} has {problem}", fix=_RECOMPILE, where=where
        )
    try:
        if kind == "mig":
            return MIG(data["profile"], data.get("count", 1))
        if kind == "timeslice":
            memory = data["memory"]
            if isinstance(memory, bool) or not isinstance(memory, int):
                raise GPURequestError(f"memory must be a number of bytes, got {memory!r}")
            request = TimeSlice(memory, data["compute"])
            if request.memory < MIN_TIMESLICE_MEMORY:
                raise GPURequestError(f"memory {memory} is less than 1Mi")
            return request
        if data.get("product") == "":
            raise GPURequestError("product must be a GPU product name or null")
        return WholeGPU(data["count"], data.get("product"))
    except GPURequestError as err:
        raise GPURequestError(
            f"GPU request: {err.what}", why=err.why, fix=_RECOMPILE, where=where
        ) from None


def decode_gpu_request(text: str, *, where: str) -> GPURequest:
    """The request `to_json()` wrote; `GPURequestError` naming what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise GPURequestError(
            f"GPU request is not JSON: {err}", fix=_RECOMPILE, where=where
        ) from None
    return gpu_request_from_dict(data, where=where)


def wire_pattern(kind: str, **members: str) -> str:
    """An RE2 pattern that matches exactly the compact JSON `to_json` writes for `kind`, with each
    member's value matching the pattern given for it (admission cannot parse JSON, so it matches
    the one byte form the compiler writes)."""
    if set(members) != set(WIRE_FIELDS[kind]):
        raise ValueError(f"wire_pattern({kind!r}) needs exactly {WIRE_FIELDS[kind]}")
    parts = [f'"kind":"{kind}"', *(f'"{name}":{members[name]}' for name in WIRE_FIELDS[kind])]
    return "^\\{" + ",".join(parts) + "\\}$"
