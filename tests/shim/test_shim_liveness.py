"""The step's accounting lock never makes a step hang (issue 35; docs/shim.md "The lock"):

- no driver or NVML call is made under it, so a slow driver call (a large allocation, an NVML query
  during the reconciliation with the driver) delays no other process of the step;
- a holder that is stopped (SIGSTOP, a debugger, a frozen cgroup) makes its waiters fail their call
  with CUDA_ERROR_OUT_OF_MEMORY and a log line after STOPPED_HOLDER_NS (1 s), charging nothing, so
  the quota stays exact; once the holder goes on, the step does too.

The fake driver's test-only `slow` directive makes its calls take that long (fake/README.md)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.support.fakegpu import MiB

from .test_shim_concurrency import _lock_holder

OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY
# What a peer's allocation may take at most meanwhile: a few ms on an idle machine, but a process of a
# loaded 2-core machine can wait 100 ms and more for a CPU; a peer held behind the slow call would
# wait its whole 0.5 s (1 s for the reconciliation).
PEER_DELAY_S = 0.25


def _slow(step, **keys: int) -> None:
    with Path(step.gpu.config_path).open("a") as config:
        config.write("slow " + " ".join(f"{k}={v}" for k, v in keys.items()) + "\n")


def _result(proc) -> dict:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _overlap(a: dict, b: dict) -> float:
    return min(a["end"], b["end"]) - max(a["start"], b["start"])


@pytest.mark.timing  # a peer's latency: run alone, after the parallel run (make test)
def test_a_slow_driver_allocation_does_not_delay_a_peer(make_step) -> None:
    """An allocation that spends 500 ms in the driver holds no lock meanwhile: a peer process
    allocating and freeing back to back all along waits for nobody."""
    step = make_step(memory=64 * MiB, device_memory=128 * MiB, scrub=False)
    _slow(step, alloc_ms=500, alloc_min=16 * MiB)
    slow = step.popen("try", str(16 * MiB))
    peer = step.popen("latency", "0.8", str(MiB))
    slow_result, peer_result = _result(slow), _result(peer)
    assert slow_result["rc"] == 0 and slow_result["end"] - slow_result["start"] >= 0.5
    assert _overlap(slow_result, peer_result) > 0.2, (slow_result, peer_result)
    assert peer_result["pairs"] > 10 and peer_result["refused"] == 0
    assert peer_result["slowest"] < PEER_DELAY_S, peer_result


@pytest.mark.timing
def test_a_slow_nvml_reconciliation_does_not_delay_a_peer(make_step) -> None:
    """Over its limit with a gone process still charged, an allocation asks NVML what the driver
    still holds (here 2 x 500 ms) outside the lock, then releases the gone charge and fits; a peer
    allocating within the limit meanwhile is not held up."""
    step = make_step(memory=16 * MiB, device_memory=128 * MiB, scrub=False)
    holder = step.popen("hold", str(8 * MiB))
    assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    _slow(step, nvml_ms=500)
    over = step.popen("try", str(12 * MiB))  # 8 MiB gone + 12 MiB > 16 MiB: reconcile first
    peer = step.popen("latency", "1.5", str(MiB))
    over_result, peer_result = _result(over), _result(peer)
    assert over_result["rc"] == 0, over_result  # the gone process's charge was released
    assert over_result["end"] - over_result["start"] >= 0.5  # it did wait for NVML
    assert _overlap(over_result, peer_result) > 0.3, (over_result, peer_result)
    assert peer_result["refused"] == 0 and peer_result["slowest"] < PEER_DELAY_S, peer_result
    # Released: all 8 MiB where NVML's process list decides; where the used memory bounds it, a
    # peer's block the first phase did not count keeps that much charged until a later look.
    assert 0 < step.counters()["reclaimed"] <= 8 * MiB
    assert step.gpu.stats()["peak"] <= 16 * MiB  # the driver's own high-water mark


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def test_a_stopped_holder_fails_waiters_after_a_bound_and_keeps_the_quota_exact(make_step) -> None:
    """A peer SIGSTOPped inside the lock: each waiter gives up after about 1 s, its allocation
    refused with CUDA_ERROR_OUT_OF_MEMORY and an error line, nothing charged; when the holder goes on
    and releases the lock, the whole quota is there again."""
    step = make_step(memory=8 * MiB)
    assert step.run("fill", str(MiB)) == {"total": 8 * MiB}  # creates the region
    holder = _lock_holder(step, "live")
    try:
        holder.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while _state(holder.pid) not in "Tt":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        waiter = step.popen("try", str(MiB), SECUREML_SHIM_LOG_LEVEL="error")
        out, err = waiter.communicate(timeout=30)
        assert waiter.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["rc"] == OUT_OF_MEMORY, (result, err)
        assert 0.9 <= result["end"] - result["start"] < 10, result
        assert "accounting lock's holder" in err and "is stopped" in err, err
        holder.send_signal(signal.SIGCONT)
        assert holder.stdin is not None
        holder.stdin.close()  # it releases the lock
        assert holder.wait(timeout=10) == 0
        assert step.run("fill", str(MiB), timeout=20) == {"total": 8 * MiB}  # nothing was charged
        assert step.counters()["refused"] >= 2  # the stopped wait's and the fills' last
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()
