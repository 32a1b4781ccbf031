"""Accounting shared by all processes of a step: 8 processes never exceed the quota together (as
counted by the fake driver itself), and processes killed mid-flight give their charges back."""

from __future__ import annotations

import signal
import time

from fakegpu import MiB


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


def test_a_process_dying_inside_the_lock_does_not_wedge_the_step(make_step) -> None:
    import subprocess

    from fakegpu import SHIM_DIR, build_native

    from secureml.enforcement.shim_control import region_path

    from .shimstep import HERE

    step = make_step(memory=8 * MiB)
    assert step.run("fill", str(MiB)) == {"total": 8 * MiB}  # creates the region
    holder_bin = build_native(
        "lock_holder",
        [HERE / "lock_holder.c"],
        flags=(f"-I{SHIM_DIR}",),
        headers=(SHIM_DIR / "region.h",),
    )
    holder = subprocess.Popen(
        [str(holder_bin), str(region_path(step.limits_file))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
    finally:
        holder.kill()
        holder.wait()
    # The lock is recovered and the torn total rebuilt from the per-process charges.
    assert step.run("fill", str(MiB), timeout=20) == {"total": 8 * MiB}
