"""The fake NVML's node-level calls (persistence, ECC, confidential computing) as pynvml reads them."""

from __future__ import annotations

import json
import textwrap

from tests.support.fakegpu import FakeConfidential, FakeDevice, FakeMig, MiB, run_python

QUERY = textwrap.dedent(
    """
    import ctypes, json
    import pynvml as n
    n.nvmlInit()
    out = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        try:
            errors = [n.nvmlDeviceGetTotalEccErrors(h, t, n.NVML_VOLATILE_ECC) for t in (0, 1)]
        except n.NVMLError_NotSupported:
            errors = "not supported"
        out.append({"persistence": n.nvmlDeviceGetPersistenceMode(h),
                    "ecc": n.nvmlDeviceGetEccMode(h), "errors": errors})
    state = n.nvmlSystemGetConfComputeState()
    settings = n.c_nvmlSystemConfComputeSettings_v1_t()
    rc = n.nvmlSystemGetConfComputeSettings(ctypes.byref(settings))
    caps = n.nvmlSystemGetConfComputeCapabilities()
    print(json.dumps({
        "devices": out,
        "state": [state.environment, state.ccFeature, state.devToolsMode],
        "settings": [rc, settings.ccFeature, settings.devToolsMode, settings.multiGpuMode],
        "caps": [caps.cpuCaps, caps.gpusCaps],
        "ready": n.nvmlSystemGetConfComputeGpusReadyState(),
    }))
    """
)


def _query(gpu) -> dict:
    result = run_python(QUERY, gpu.env())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_defaults_are_a_healthy_machine_without_cc(make_fake_gpu) -> None:
    seen = _query(make_fake_gpu())
    assert seen["devices"] == [{"persistence": 1, "ecc": [1, 1], "errors": [0, 0]}]
    assert seen["state"] == [0, 0, 0] and seen["caps"] == [0, 0] and seen["ready"] == 0


def test_configured_persistence_ecc_and_cc_state(make_fake_gpu) -> None:
    gpu = make_fake_gpu(
        devices=[
            FakeDevice(persistence_mode=False, ecc_corrected=7, ecc_uncorrected=2),
            FakeDevice(ecc_mode=False, mig_mode=True, migs=[FakeMig("1g.10gb", 32 * MiB)]),
        ],
        confidential=FakeConfidential(mode="devtools", ready=True, capable=True, cpu=2),
    )
    seen = _query(gpu)
    assert seen["devices"][0] == {"persistence": 0, "ecc": [1, 1], "errors": [7, 2]}
    assert seen["devices"][1]["errors"] == "not supported"
    assert seen["state"] == [2, 1, 1]
    assert seen["settings"] == [0, 1, 1, 0]
    assert seen["caps"] == [2, 1] and seen["ready"] == 1
