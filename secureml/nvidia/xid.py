"""NVIDIA's Xid codes, classified for secureml: what an Xid says about a step and its GPU.

docs/xid.md prints the table and its sources; the launcher imports it, so stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

XidClass = Literal["application", "memory", "device", "nvlink", "unclassified"]
Action = Literal["restart-step", "drain-reset", "replace", "investigate"]

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NVSENTINEL_SOURCE = (
    "NVIDIA/NVSentinel distros/kubernetes/nvsentinel/charts/gpu-health-monitor/"
    "xiderrorsmapping.csv@6f8b0fcfa8e502bdda78fabf96facef729a9285b"
)
SOURCES: dict[str, str] = {"catalog": CATALOG_URL, "nvsentinel": NVSENTINEL_SOURCE}

# The classes after which the device's memory cannot be trusted: the step stops, the GPU is reset.
UNTRUSTED_CLASSES: frozenset[XidClass] = frozenset({"memory", "device"})

ACTION_TEXT: dict[Action, str] = {
    "restart-step": "restart the step (the fault is the step's own; the GPU stays in service)",
    "drain-reset": "drain the node and reset the GPU (`nvidia-smi -r`, or reboot the node) "
    "before another step uses it; replace it if the Xid recurs after the reset",
    "replace": "drain the node, reset the GPU and open an RMA: the GPU could not repair itself",
    "investigate": f"look the Xid up in NVIDIA's catalogue ({CATALOG_URL}) and act on its "
    "resolution bucket",
}


@dataclass(frozen=True)
class XidRow:
    """One Xid: NVIDIA's mnemonic and immediate action, secureml's class and action, the sources."""

    xid: int
    mnemonic: str
    nvidia_action: str  # the catalogue's Resolution Bucket (Immediate Action), verbatim
    xid_class: XidClass
    action: Action
    summary: str  # what it means, in secureml's words
    sources: tuple[str, ...] = ("catalog", "nvsentinel")
    note: str = ""  # where secureml's action departs from the catalogue, and why

    @property
    def memory_untrusted(self) -> bool:
        return self.xid_class in UNTRUSTED_CLASSES

    def to_json(self) -> dict[str, object]:
        return {
            "xid": self.xid,
            "mnemonic": self.mnemonic,
            "nvidia_action": self.nvidia_action,
            "class": self.xid_class,
            "action": self.action,
            "summary": self.summary,
            "sources": list(self.sources),
            "note": self.note,
        }


def _app(xid: int, mnemonic: str, nvidia: str, summary: str, note: str = "") -> XidRow:
    return XidRow(xid, mnemonic, nvidia, "application", "restart-step", summary, note=note)


def _mem(
    xid: int, mnemonic: str, nvidia: str, summary: str, note: str = "", act: Action = "drain-reset"
) -> XidRow:
    return XidRow(xid, mnemonic, nvidia, "memory", act, summary, note=note)


def _dev(xid: int, mnemonic: str, nvidia: str, summary: str, note: str = "") -> XidRow:
    return XidRow(xid, mnemonic, nvidia, "device", "drain-reset", summary, note=note)


def _link(xid: int, mnemonic: str, nvidia: str) -> XidRow:
    return XidRow(
        xid,
        mnemonic,
        nvidia,
        "nvlink",
        "drain-reset",
        "NVLink error: traffic between GPUs failed; the GPU's own memory is not implicated",
    )


_FAIL_CLOSED = (
    "the catalogue does not require a reset; secureml does, because memory with a pending "
    "repair is not handed to the next tenant (the preflight refuses pending retirements too)"
)

ROWS: tuple[XidRow, ...] = (
    # application faults: the step's own code or data; the GPU stays in service
    _app(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "RESTART_APP",
        "graphics engine exception: an illegal instruction or out-of-range access in a kernel",
    ),
    _app(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "RESTART_APP",
        "GPU memory-management fault: a kernel touched an address it does not own",
    ),
    _app(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "IGNORE",
        "the driver stopped the faulting application's channel; other work continues",
        note="the catalogue ignores it for the node; the step it names has lost its GPU context",
    ),
    _app(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "WORKFLOW_XID_45",
        "the driver removed a channel, usually after another fault or when the process was "
        "killed; read the Xid logged before it",
    ),
    # memory / ECC: the device's memory holds (or held) corrupted data
    _mem(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "WORKFLOW_XID_48",
        "uncorrectable (double-bit) ECC error in device memory",
    ),
    _mem(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "IGNORE",
        "a memory row was marked for remapping (or a page for retirement); it takes effect at "
        "the next GPU reset",
        note=_FAIL_CLOSED,
    ),
    _mem(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "RESET_GPU",
        "remapping a row (or retiring a page) failed: bad memory stays in use",
        note="the catalogue's immediate action is a reset; a failed repair is the RMA path",
        act="replace",
    ),
    _mem(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "IGNORE",
        "a high rate of corrected (single-bit) ECC errors: the memory is degrading",
        note=_FAIL_CLOSED,
    ),
    _mem(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "RESTART_APP",
        "contained uncorrectable ECC error: the processes using the memory were stopped; the "
        "row awaits remapping at the next reset",
        note="the catalogue restarts the application; the row's repair needs a reset, so "
        "secureml drains first (the next tenant would inherit it)",
    ),
    _mem(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "RESET_GPU",
        "uncontained uncorrectable ECC error: every process on the GPU is affected",
    ),
    _mem(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "RESET_GPU",
        "an uncorrectable ECC error escaped containment",
    ),
    # device / bus: the GPU or its firmware stopped answering
    _dev(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "the GPU stopped processing"),
    _dev(62, "PMU_HALT_ERROR", "RESET_GPU", "the GPU's internal power-management unit halted"),
    _dev(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "RESTART_BM",
        "the GPU has fallen off the PCIe bus: the host can no longer reach it",
        note="the catalogue's RESTART_BM is a reboot of the node: the reset here",
    ),
    _dev(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "a context switch timed out"),
    _dev(
        119, "GSP_RPC_TIMEOUT", "RESET_GPU", "the GPU System Processor stopped answering the driver"
    ),
    _dev(120, "GSP_ERROR", "RESET_GPU", "the GPU System Processor reported an error"),
    _dev(143, "GPU_INIT_ERROR", "RESET_GPU", "the GPU failed to initialise"),
    _dev(158, "GPU_FATAL_TIMEOUT", "RESET_GPU", "a fatal timeout in the GPU"),
    # NVLink: links between GPUs
    _link(74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    *(
        _link(xid, mnemonic, "WORKFLOW_NVLINK5_ERR")
        for xid, mnemonic in (
            (144, "NVLINK_SAW_ERROR"),
            (145, "NVLINK_RLW_ERROR"),
            (146, "NVLINK_TLW_ERROR"),
            (147, "NVLINK_TREX_ERROR"),
            (148, "NVLINK_NVLPW_CTRL_ERROR"),
            (149, "NVLINK_NETIR_ERROR"),
            (150, "NVLINK_MSE_ERROR"),
        )
    ),
)

TABLE: dict[int, XidRow] = {row.xid: row for row in ROWS}


def classify(xid: int) -> XidRow:
    """The row for `xid`; an Xid outside the table is `unclassified`, to be looked up."""
    row = TABLE.get(xid)
    if row is not None:
        return row
    return XidRow(
        xid,
        "",
        "",
        "unclassified",
        "investigate",
        f"Xid {xid} is not in secureml's table",
        sources=(),
    )
