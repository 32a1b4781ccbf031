"""Accounting shared by all processes of a step: 8 processes never exceed the quota together (as
counted by the fake driver itself), and processes killed mid-flight give their charges back."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.support.fakegpu import GiB, MiB


def test_eight_processes_never_exceed_the_quota_together(make_step) -> None:
    quota = 24 * MiB
    step = make_step(memory=quota, device_memory=128 * MiB, scrub=False)
    workers = [step.popen("stress", "2000", str(seed), str(2 * MiB)) for seed in range(1, 9)]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        results.append(out)
    stats = step.gpu.stats()
    assert 0 < stats["peak"] <= quota  # the fake's own high-water mark over all 8 processes
    assert stats["allocs"] == stats["frees"] and stats["used"] == 0
    counters = step.counters()
    assert counters["peak"] <= quota and counters["refused"] > 0  # the quota was actually contended
    assert counters["devices"][0]["used"] == 0
    # Without the limit the same load goes well past it (the test would catch a shim that lets it).
    free_step = make_step(memory=128 * MiB, device_memory=128 * MiB, scrub=False)
    runs = [free_step.popen("stress", "2000", str(seed), str(2 * MiB)) for seed in range(1, 9)]
    for run in runs:
        run.communicate(timeout=120)
    assert free_step.gpu.stats()["peak"] > quota


def test_threads_freeing_each_others_blocks_keep_the_accounting_exact(make_step) -> None:
    """The main thread allocates alone first (the shim's allocation table is then its own and takes
    no lock), then 7 more threads join and free each other's blocks: the table changes to its
    locked mode under way. Every charge comes back and the quota holds throughout. The threads
    charge under the step's lock and release without it: where two of them change the process's
    charge at once, each as a load and a store, one change is lost (an overcommit or a leak), in
    about one run in eight on a loaded 2-core machine, so several runs (seeds) of ~0.1 s each."""
    quota = 24 * MiB
    for seed in range(7, 15):
        step = make_step(memory=quota, device_memory=128 * MiB, scrub=False)
        result = step.run("threads", "8", "3000", str(seed), str(2 * MiB), timeout=120)
        assert result["ok"] > 0 and result["refused"] > 0  # the quota was contended
        stats = step.gpu.stats()
        assert 0 < stats["peak"] <= quota, seed
        assert stats["allocs"] == stats["frees"] and stats["used"] == 0, seed
        counters = step.counters()
        assert counters["devices"][0]["used"] == 0 and counters["peak"] <= quota, seed
        assert step.run("fill", str(MiB)) == {"total": quota}  # nothing left charged


def test_a_killed_process_gives_its_charges_back(make_step) -> None:
    step = make_step(memory=16 * MiB)
    holder = step.popen("hold", str(12 * MiB))
    assert holder.stdout.readline().startswith("ready")
    assert step.run("fill", str(MiB)) == {"total": 4 * MiB}
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert step.run("fill", str(MiB)) == {"total": 16 * MiB}
    assert step.gpu.stats()["peak"] <= 16 * MiB


def test_processes_killed_mid_flight_leave_the_accounting_usable(make_step) -> None:
    """SIGKILL at random points of busy alloc/free loops: some die inside the shared lock or between
    charge and allocation. Survivors and newcomers must neither deadlock nor lose quota."""
    step = make_step(memory=16 * MiB, scrub=False)
    for round_ in range(3):
        victims = [
            step.popen("stress", "1000000", str(100 * round_ + i), str(MiB)) for i in range(4)
        ]
        time.sleep(0.15 + 0.05 * round_)
        for victim in victims:
            victim.send_signal(signal.SIGKILL)
        for victim in victims:
            victim.wait(timeout=10)
    assert step.run("fill", str(MiB), timeout=20) == {"total": 16 * MiB}
    assert step.gpu.stats()["peak"] <= 16 * MiB


def _lock_holder(step, mode: str) -> subprocess.Popen[str]:
    """tests/shim/lock_holder.c holding the accounting lock of `step`'s region (see its modes)."""
    from secureml.enforcement.shim_control import region_path
    from tests.support.fakegpu import SHIM_DIR, build_native

    from .shimstep import HERE

    holder_bin = build_native(
        "lock_holder",
        [HERE / "lock_holder.c"],
        flags=(f"-I{SHIM_DIR}", "-pthread"),
        headers=(SHIM_DIR / "region.h",),
    )
    holder = subprocess.Popen(
        [str(holder_bin), str(region_path(step.limits_file)), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_holder_dying_inside_the_lock_does_not_wedge_the_step(make_step, mode: str) -> None:
    """A process SIGKILLed in the lock, or a thread that exited in it while its process lives on:
    the next locker finds the holder's thread gone and takes the lock over."""
    step = make_step(memory=8 * MiB)
    assert step.run("fill", str(MiB)) == {"total": 8 * MiB}  # creates the region
    holder = _lock_holder(step, mode)
    try:
        if mode == "process":
            holder.kill()
            holder.wait()
        # Nothing to rebuild: the use is the sum of the per-process charges.
        assert step.run("fill", str(MiB), timeout=20) == {"total": 8 * MiB}
    finally:
        holder.kill()
        holder.wait()


def test_a_live_holder_keeps_the_lock(make_step) -> None:
    """Waiters look at the holder, and a live one is waited for, however long it holds the lock."""
    step = make_step(memory=8 * MiB)
    assert step.run("fill", str(MiB)) == {"total": 8 * MiB}
    holder = _lock_holder(step, "live")
    try:
        waiter = step.popen("fill", str(MiB))
        time.sleep(1.0)  # many times the waiters' look at the holder (every ~1 ms)
        assert waiter.poll() is None  # still waiting for the lock
        assert holder.stdin is not None
        holder.stdin.close()  # release
        assert holder.wait(timeout=10) == 0
        out, err = waiter.communicate(timeout=20)
        assert waiter.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == {"total": 8 * MiB}
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize(
    ("kills", "pid_offset"),
    [(0, 0), (1, 0), (3, 0), (3, 1_000_000)],
    ids=["0", "1", "3", "3-hostpids"],
)
def test_no_overcommit_at_1_gib_when_processes_are_killed(
    make_step, kills: int, pid_offset: int
) -> None:
    """8 processes x 2,000 random alloc/free of up to 96 MiB under a 1 GiB quota, `kills` of them
    SIGKILLed mid-run. The fake driver frees a killed process's memory only 300 ms after the process
    is gone (a real driver tears the context down after the process): the shim must keep the dead
    process's charge until then. The driver's own high-water mark never passes the quota, and a fresh
    process gets the whole quota afterwards. With `pid_offset` NVML lists other pids than the
    step's (host pids seen from a container): the shim then bounds what the dead can still hold
    by the device's used memory."""
    quota = GiB
    options = {"teardown_ms": 300, "nvml_pid_offset": pid_offset}
    step = make_step(memory=quota, device_memory=4 * GiB, scrub=False, gpu_options=options)
    workers = [
        step.popen("stress", "2000", str(seed), str(96 * MiB), "150") for seed in range(1, 9)
    ]
    started = time.monotonic()
    while step.gpu.stats()["allocs"] < 400 and time.monotonic() - started < 30:
        time.sleep(0.01)  # mid-run: every worker is busy allocating
    for victim in workers[:kills]:
        victim.send_signal(signal.SIGKILL)
    for victim in workers[:kills]:
        victim.wait(timeout=10)
    for worker in workers[kills:]:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert '"refused"' in out
    stats = step.gpu.stats()
    assert 0 < stats["peak"] <= quota, (
        stats
    )  # the driver's own truth, dead processes' memory included
    counters = step.counters()
    assert counters["peak"] <= quota and counters["refused"] > 0
    deadline = time.monotonic() + 10
    while (total := step.run("fill", str(64 * MiB), timeout=20)["total"]) < quota:
        assert time.monotonic() < deadline, f"quota lost for good: a fresh process got {total}"
        time.sleep(0.1)
    assert total == quota
    assert step.gpu.stats()["peak"] <= quota
    if kills:
        assert step.counters()["reclaimed"] > 0  # released by reconciliation with the driver
