"""The launcher's role (docs/shim.md "The launcher's own process"): pass-through in the one process
that claimed it first, enforcing everywhere else, granted once per step region."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.fakegpu import MiB

from .shimstep import CUDA_PY, Step

MakeStep = Callable[..., Step]

CLAIM_PY = (
    CUDA_PY
    + """
import os
shim = ctypes.CDLL(None)
def claim():
    why = ctypes.create_string_buffer(256)
    return shim.secureml_shim_claim_launcher(why, len(why)), why.value.decode()
def total():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return total.value
"""
)


def test_the_launcher_passes_through_and_its_forked_child_enforces(make_step: MakeStep) -> None:
    step = make_step(device_memory=64 * MiB, memory=8 * MiB)
    out = step.python(
        CLAIM_PY
        + f"""
claimed = claim()
mode, seen = shim.secureml_shim_mode(), total()
big, _ = alloc({32 * MiB})
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    child_alloc, _ = alloc({16 * MiB})
    os.write(w, json.dumps([shim.secureml_shim_mode(), child_alloc, total()]).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 4096))
print(json.dumps({{"claimed": claimed, "mode": mode, "total": seen, "big": big, "child": child}}))
"""
    )
    assert out["claimed"] == [0, ""]
    assert out["mode"] == 2  # pass-through
    assert out["total"] == 64 * MiB  # the device's memory, not the step's limit
    assert out["big"] == 0  # 32 MiB over an 8 MiB limit: not the launcher's limit
    assert out["child"] == [1, 2, 8 * MiB]  # enforcing again: CUDA_ERROR_OUT_OF_MEMORY, limit shown
    assert step.gpu.stats()["failed"] == 0  # the child's refusal came from the shim, not the device


def test_the_role_is_granted_once_and_refusals_are_counted(make_step: MakeStep) -> None:
    step = make_step(memory=8 * MiB)
    first = step.python(
        CLAIM_PY + "print(json.dumps([os.getpid(), claim(), shim.secureml_shim_mode()]))"
    )
    assert first[1] == [0, ""] and first[2] == 2
    # the launcher exited: its role is still not handed to anyone else
    second = step.python(
        CLAIM_PY + f"print(json.dumps([claim(), shim.secureml_shim_mode(), alloc({16 * MiB})[0]]))"
    )
    assert second == [
        [-1, f"process {first[0]} already holds the launcher role of this step"],
        1,
        2,
    ]
    counters = step.counters()
    assert counters["launcher_pid"] == first[0]
    assert counters["launcher_claims_refused"] == 1


def test_a_process_that_already_charged_cannot_become_the_launcher(make_step: MakeStep) -> None:
    step = make_step(memory=8 * MiB)
    out = step.python(
        CLAIM_PY
        + f"""
held, _ = alloc({1 * MiB})
print(json.dumps([held, claim(), shim.secureml_shim_mode(), alloc({16 * MiB})[0]]))
"""
    )
    assert out == [
        0,
        [
            -1,
            "processes of the step already use its account; the launcher claims before the step starts",
        ],
        1,
        2,
    ]
    assert step.counters()["launcher_claims_refused"] == 1


def test_no_claim_where_the_shim_cannot_enforce(make_step: MakeStep) -> None:
    step = make_step(memory=8 * MiB)
    step.limits_file.chmod(0o644)
    step.limits_file.write_text("version=1\nmemory=8Mi\n")
    out = step.python(
        CLAIM_PY + f"print(json.dumps([claim(), shim.secureml_shim_mode(), alloc({1 * MiB})[0]]))"
    )
    (code, why), mode, refused = out
    assert (code, mode, refused) == (-1, 1, 2)  # fails closed: no role, every allocation refused
    assert why.startswith("the shim cannot enforce in this container: limits file")
