"""The launcher's configuration: the GPU request JSON and the SECUREML_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml import contract
from secureml.enforcement.config import (
    ConfigError,
    MigRequest,
    TimeSliceRequest,
    WholeRequest,
    load_config,
    parse_gpu_request,
)
from secureml.gpu import MIG, TimeSlice, WholeGPU


@pytest.mark.parametrize(
    ("sdk_request", "expected"),
    [
        (MIG("1g.10gb"), MigRequest("1g.10gb", 1)),
        (MIG("3g.40gb", count=2), MigRequest("3g.40gb", 2)),
        (TimeSlice(memory=8 * 2**30, compute=25), TimeSliceRequest(8 * 2**30, 25)),
        (WholeGPU(2, product="NVIDIA-H100-80GB-HBM3"), WholeRequest(2, "NVIDIA-H100-80GB-HBM3")),
        (WholeGPU(1), WholeRequest(1, None)),
    ],
)
def test_parses_what_the_sdk_writes(sdk_request: object, expected: object) -> None:
    parsed = parse_gpu_request(sdk_request.to_json())  # type: ignore[attr-defined]
    assert parsed == expected
    assert parsed.to_json() == expected.to_json()  # type: ignore[attr-defined]


def test_mig_profile_memory() -> None:
    assert MigRequest("1g.10gb").memory_gb == 10
    assert MigRequest("7g.141gb").memory_gb == 141
    assert MigRequest("1g.10gb+me").memory_gb == 10


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"kind":"vgpu"}', "kind must be one of"),
        ('{"kind":"mig","profile":"big","count":1}', "MIG profile"),
        ('{"kind":"mig","profile":"1g.10gb","count":0}', "'count'"),
        ('{"kind":"mig","profile":"1g.10gb","memory":5}', "unknown field"),
        ('{"kind":"timeslice","memory":1024,"compute":101}', "at most 100"),
        ('{"kind":"timeslice","memory":"8Gi","compute":10}', "'memory'"),
        ('{"kind":"whole","count":true}', "'count'"),
        ('{"kind":"whole","count":1,"product":""}', "product"),
    ],
)
def test_rejects_malformed_requests(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_gpu_request(text)
    assert fragment in caught.value.diagnostics()
    assert contract.ENV_GPU_REQUEST in caught.value.diagnostics()


def test_defaults_for_an_empty_environment() -> None:
    config = load_config({})
    assert config.isolation == contract.ISOLATION_NONE and not config.uses_gpu
    assert not (config.identity_required or config.scrub_before or config.scrub_after)
    assert (config.scrub_verify, config.shim_mode) == ("off", "off")
    assert config.shim_limits_file == Path(contract.SHIM_LIMITS_PATH)
    assert config.audit_dir is None


def test_full_environment() -> None:
    config = load_config(
        {
            contract.ENV_ISOLATION: "timeslice-shim",
            contract.ENV_GPU_REQUEST: '{"kind":"timeslice","memory":1073741824,"compute":20}',
            contract.ENV_IMAGE: "reg.example/train@sha256:" + "0" * 64,
            contract.ENV_SCRUB_BEFORE: "true",
            contract.ENV_SCRUB_AFTER: "TRUE",
            contract.ENV_SCRUB_VERIFY: "full",
            contract.ENV_SHIM_LIMITS_FILE: "/tmp/limits",
            contract.ENV_WATCHDOG_INTERVAL: "0.1",
            contract.ENV_AUDIT_DIR: "/tmp/audit",
        }
    )
    assert config.uses_gpu and config.shim_required  # timeslice-shim requires the shim
    assert config.gpu_request == TimeSliceRequest(2**30, 20)
    assert config.scrub_before and config.scrub_after and config.scrub_verify == "full"
    assert config.image_digest == "sha256:" + "0" * 64
    assert config.watchdog_interval_s == 0.1
    assert config.shim_limits_file == Path("/tmp/limits")


def test_mig_step_does_not_require_the_shim() -> None:
    config = load_config(
        {
            contract.ENV_ISOLATION: "mig",
            contract.ENV_GPU_REQUEST: '{"kind":"mig","profile":"1g.10gb","count":1}',
            contract.ENV_SHIM_MODE: "enforce",
        }
    )
    assert config.uses_gpu and not config.shim_required


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({contract.ENV_SCRUB_BEFORE: "maybe"}, contract.ENV_SCRUB_BEFORE),
        ({contract.ENV_SHIM_MODE: "audit"}, contract.ENV_SHIM_MODE),
        ({contract.ENV_ISOLATION: "vm"}, contract.ENV_ISOLATION),
        ({contract.ENV_ISOLATION: "mig"}, contract.ENV_GPU_REQUEST),
        ({contract.ENV_IDENTITY_REQUIRED: "true"}, contract.ENV_EXPECTED_SPIFFE_ID),
        ({contract.ENV_IDENTITY_TIMEOUT: "-1"}, contract.ENV_IDENTITY_TIMEOUT),
        ({contract.ENV_WATCHDOG_GRACE: "soon"}, contract.ENV_WATCHDOG_GRACE),
    ],
)
def test_rejects_bad_variables(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    assert names in caught.value.diagnostics()
