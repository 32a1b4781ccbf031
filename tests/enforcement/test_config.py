"""The launcher's configuration: the GPU request JSON and the SECUREML_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.enforcement.config import ConfigError, load_config
from secureml.gpu.request import MIG, TimeSlice, WholeGPU, decode_gpu_request


@pytest.mark.parametrize(
    "sdk_request",
    [
        MIG("1g.10gb"),
        MIG("3g.40gb", count=2),
        TimeSlice(memory="8Gi", compute=25),
        WholeGPU(2, product="NVIDIA-H100-80GB-HBM3"),
        WholeGPU(1),
    ],
)
def test_the_launcher_reads_the_value_the_sdk_writes(
    sdk_request: MIG | TimeSlice | WholeGPU,
) -> None:
    config = load_config(
        {
            contract.ENV_ISOLATION: "mig",
            contract.ENV_GPU_REQUEST: sdk_request.to_json(),
        }
    )
    assert config.gpu_request == sdk_request
    assert config.gpu_request is not None and config.gpu_request.to_json() == sdk_request.to_json()


def test_mig_profile_memory() -> None:
    assert MIG("1g.10gb").memory_gb == 10
    assert MIG("7g.141gb").memory_gb == 141
    assert MIG("1g.10gb+me").memory_gb == 10


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"kind":"vgpu"}', "kind must be one of"),
        ('{"kind":"mig","profile":"big","count":1}', "MIG profile"),
        ('{"kind":"mig","profile":"1g.10gb","count":0}', "count 0"),
        ('{"kind":"mig","profile":"1g.10gb","memory":5}', "unknown field"),
        ('{"kind":"timeslice","memory":1073741824,"compute":101}', "from 1 to 100"),
        ('{"kind":"timeslice","memory":"8Gi","compute":10}', "memory must be a number of bytes"),
        ('{"kind":"timeslice","memory":1024,"compute":10}', "less than 1Mi"),
        ('{"kind":"timeslice","compute":10}', "no field(s) ['memory']"),
        ('{"kind":"whole","count":true}', "count True"),
        ('{"kind":"whole","count":1,"product":""}', "product"),
    ],
)
def test_rejects_malformed_requests(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({contract.ENV_ISOLATION: "mig", contract.ENV_GPU_REQUEST: text})
    assert fragment in caught.value.diagnostics()
    assert contract.ENV_GPU_REQUEST in caught.value.diagnostics()
    with pytest.raises(SecuremlError):  # the reports and the local runner read it the same way
        decode_gpu_request(text, where="test")


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
    assert config.gpu_request == TimeSlice(memory="1Gi", compute=20)
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
