"""The machine's confidential-computing (CC) state, as NVML reports it, and the preflight's check.

NVML keeps CC state per system, not per device: `nvmlSystemGetConfComputeState` says whether the
CC feature is on and whether it is in devtools mode (a debugging mode in which the GPU's
protections are relaxed: not confidential), `nvmlSystemGetConfComputeGpusReadyState` whether the
GPUs accept work (the CC manager or an attestation agent sets it after attesting the GPU), and
`nvmlSystemGetConfComputeCapabilities` what the CPU (SEV-SNP, TDX) and the GPUs support. A step
that requires CC runs only with the feature on, not in devtools, and the GPUs ready; anything
NVML cannot tell counts as not confidential (fail closed). `secureml doctor node` reads the same.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from typing import Any

from secureml.core.errors import SecuremlError

CPU_CAPS = {0: "none", 1: "amd-sev", 2: "intel-tdx", 3: "amd-sev-snp", 4: "amd-snp-vtom"}
ENVIRONMENTS = {0: "unavailable", 1: "simulated", 2: "production"}
MULTI_GPU = {0: "none", 1: "protected-pcie", 2: "nvlink-encryption"}


class ConfidentialComputingError(SecuremlError):
    """The step requires confidential computing and the machine's GPUs are not in CC mode."""


@dataclass(frozen=True)
class CCState:
    """What NVML says; `error` is set (and the rest defaulted) when NVML could not tell."""

    mode: str = "unknown"  # on | off | devtools | unknown
    ready: bool = False
    gpus_capable: bool = False
    cpu: str = "unknown"
    environment: str = "unknown"
    multi_gpu: str = "unknown"
    error: str = ""

    @property
    def confidential(self) -> bool:
        """CC on, not devtools, GPUs ready: what `confidentialComputing: required` needs."""
        return not self.error and self.mode == "on" and self.ready

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_cc_state(nvml: Any) -> CCState:
    """The system's CC state through an initialised `pynvml`; `CCState(error=...)` where NVML
    (an old driver, a GPU without CC) does not answer."""
    try:
        state = nvml.nvmlSystemGetConfComputeState()
        caps = nvml.nvmlSystemGetConfComputeCapabilities()
        ready = int(nvml.nvmlSystemGetConfComputeGpusReadyState())
    except nvml.NVMLError as err:
        return CCState(error=f"NVML cannot report the confidential-computing state: {err}")
    mode = "off"
    if int(state.ccFeature) == nvml.NVML_CC_SYSTEM_FEATURE_ENABLED:
        mode = "devtools" if int(state.devToolsMode) else "on"
    multi_gpu = "unknown"
    settings = nvml.c_nvmlSystemConfComputeSettings_v1_t()
    try:  # newer than the state call: an older driver lacks it
        # pynvml passes the struct as given: by reference, as nvml.h declares it.
        if nvml.nvmlSystemGetConfComputeSettings(ctypes.byref(settings)) == nvml.NVML_SUCCESS:
            multi_gpu = MULTI_GPU.get(int(settings.multiGpuMode), str(settings.multiGpuMode))
    except nvml.NVMLError:
        pass
    return CCState(
        mode=mode,
        ready=bool(ready),
        gpus_capable=int(caps.gpusCaps) == nvml.NVML_CC_SYSTEM_GPUS_CC_CAPABLE,
        cpu=CPU_CAPS.get(int(caps.cpuCaps), str(caps.cpuCaps)),
        environment=ENVIRONMENTS.get(int(state.environment), str(state.environment)),
        multi_gpu=multi_gpu,
    )


def require_confidential(nvml: Any) -> dict[str, Any]:
    """The audit's `confidential_computing` section; `ConfidentialComputingError` unless CC holds."""
    state = read_cc_state(nvml)
    if not state.confidential:
        seen = state.error or (
            f"CC mode {state.mode}, GPUs {'ready' if state.ready else 'not ready'} for work"
        )
        raise ConfidentialComputingError(
            f"the step requires confidential computing; {seen}",
            why="the tenant's profile sets gpu.confidentialComputing: required; outside CC mode "
            "(or in devtools mode) the GPU's memory and its traffic with the CPU are not protected "
            "from the host",
            fix="schedule the step only on nodes the GPU operator's CC manager labels "
            "nvidia.com/cc.ready.state=true; check the node with `secureml doctor node`",
            where="GPU preflight",
        )
    return {"required": True, **state.to_json()}
