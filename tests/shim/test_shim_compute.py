"""Compute limit: launches are paced so that the step's share of the (simulated) device stays at
the limit, steadily, however many processes launch. The fake counts device time itself.

Windows are judged by their median (a launcher that the loaded test machine does not schedule for a
moment dips below its share; that is not the pacer's doing) and no window may overshoot: exceeding
the share is the failure that matters for a limit, and swinging above it is what oscillation
looks like."""

from __future__ import annotations

import json
import statistics
import time

import pytest

from tests.support.fakegpu import MiB

pytestmark = pytest.mark.timing

RUN_S = 4.0
WINDOW_S = 0.25
SETTLE_S = 1.5


def _shares(step, workers) -> list[float]:
    """Busy share (percent) of the device in consecutive windows after the controller settled."""
    time.sleep(SETTLE_S)
    shares, previous = [], step.gpu.stats()
    while all(w.poll() is None for w in workers) and len(shares) < int(
        (RUN_S - SETTLE_S - 0.3) / WINDOW_S
    ):
        time.sleep(WINDOW_S)
        current = step.gpu.stats()
        shares.append(
            100
            * (current["busy_ns"] - previous["busy_ns"])
            / (current["now_ns"] - previous["now_ns"])
        )
        previous = current
    for worker in workers:
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        worker.stdout_text = out
    return shares


@pytest.mark.parametrize(("limit", "processes"), [(30, 1), (45, 3)])
def test_the_compute_share_is_held_steadily(make_step, limit: int, processes: int) -> None:
    step = make_step(
        memory=16 * MiB, compute=limit, gpu_options={"kernel_us": 500, "queue_depth": 4}
    )
    workers = [step.popen("launch", str(RUN_S)) for _ in range(processes)]
    shares = _shares(step, workers)
    assert len(shares) >= 4
    assert abs(statistics.median(shares) - limit) <= 0.1 * limit, (
        shares
    )  # within +/-10% of the target
    assert max(shares) <= 1.2 * limit, shares  # never above it
    assert step.counters()["throttled"] > 0


def test_without_a_compute_limit_nothing_is_throttled(make_step) -> None:
    step = make_step(memory=16 * MiB, compute=100, gpu_options={"kernel_us": 500, "queue_depth": 4})
    shares = _shares(step, [step.popen("launch", str(RUN_S))])
    assert statistics.median(shares) > 90
    assert step.counters()["throttled"] == 0


def test_two_tenants_on_one_device_each_get_their_share(make_step) -> None:
    """Each step paces on its own processes' utilisation (NVML per-process samples), not the whole
    device's: two steps limited to 40 % each get about 40 % each, and the device about 80 %."""
    first = make_step(memory=16 * MiB, compute=40, gpu_options={"kernel_us": 500, "queue_depth": 4})
    second = make_step(memory=16 * MiB, compute=40, gpu=first.gpu)
    workers = [first.popen("launch", str(RUN_S)), second.popen("launch", str(RUN_S))]
    shares = _shares(first, workers)
    assert abs(statistics.median(shares) - 80) <= 8 and max(shares) <= 90, shares
    launches = [json.loads(w.stdout_text)["launches"] for w in workers]
    assert 0.8 <= launches[0] / launches[1] <= 1.25, launches
