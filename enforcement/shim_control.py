"""The native quota shim, seen from Python: find it, arm a child process with it, read its counters.

The shim itself is C (`enforcement/shim/`, docs/shim.md). The launcher uses three functions:

- `library_path() -> Path`: the built `libsecureml_shim.so`. `SECUREML_SHIM_LIBRARY`
  (`contract.ENV_SHIM_LIBRARY`, read from the launcher's own environment, never the step's) may
  name another build; otherwise the copy built into this package by `pip install` (or by
  `python -m secureml.enforcement.shim_control build`). Raises `SecuremlError` with a fix when there is none.
- `child_env(limits_file, counters_file=None, base_env=None, *, log_level=None) -> dict[str, str]`:
  the environment for the step's command: LD_PRELOAD with the shim first, the limits file (used
  only where the compiled-in path `contract.SHIM_LIMITS_PATH` does not exist: in a cluster the
  read-only downward-API file always wins), the counters file, the log level.
- `read_counters(path) -> dict`: the counters the shim wrote (refused allocations, peak use,
  throttled launches, per device), for the audit record.

The launcher's own process (docs/shim.md "The launcher's own process"): in a cluster
`/etc/ld.so.preload` loads the shim into every process of the container, the launcher included.
`claim_launcher(limits_file)` makes the launcher the one process in which the shim passes every
call through (its preflight, scrub and watchdog must see the whole device), and, where the shim is
not preloaded, still takes that role in the step's region so that no step process can.
`enforcing_here()` tells the scrub whether the shim limits this process.

`region_path(limits_file)` names the step's shared accounting region (derived from the limits
file's identity) and `remove_region(limits_file)` deletes it after the step. `build(output_dir)`
compiles the shim (used by setup.py and `make test`); it needs only the standard library, so
setup.py can load this file before the package is installed.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LIBRARY_NAME = "libsecureml_shim.so"
SOURCE_DIR = Path(__file__).resolve().parent / "shim"
# The shim's units (enforcement/shim/shim.h says what each owns) and its headers.
SOURCES = (
    "shim.c",
    "region.c",
    "accounting.c",
    "table.c",
    "memory.c",
    "graph.c",
    "scrub.c",
    "pacing.c",
    "firewall.c",
    "nvml.c",
    "lookup.c",
    "counters.c",
    "launcher.c",
    "limits.c",
    "libc_syms.c",
)
HEADERS = (
    "shim.h",
    "accounting.h",
    "table.h",
    "region.h",
    "limits.h",
    "libc_syms.h",
    "cuda_api.h",
    "nvml_api.h",
)
CFLAGS = (
    "-std=c11",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-pthread",
    "-Wall",
    "-Wextra",
)
LOG_LEVELS = ("off", "error", "warn", "info", "debug")
CLAIM_FUNCTION = "secureml_shim_claim_launcher"
MODE_FUNCTION = "secureml_shim_mode"
MODE_LAUNCHER = 2  # what the mode query answers in the launcher role; any other answer enforces
# Copies of the shim this process loaded itself (RTLD_LOCAL) to take the launcher role: mapped,
# but not interposed, so they limit nothing here.
_private_copies: set[str] = set()


def find_compiler() -> str | None:
    """`$CC`, else the first of cc, gcc, clang on PATH; None when there is no C compiler."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build(
    output_dir: Path, *, compiler: str | None = None, extra_flags: tuple[str, ...] = ()
) -> Path:
    """Compile the shim into `output_dir/libsecureml_shim.so` (atomically) and return its path.

    Raises RuntimeError when there is no compiler or the compilation fails.
    """
    cc = compiler or find_compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (install cc/gcc/clang or set CC)")
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / LIBRARY_NAME
    fd, tmp = tempfile.mkstemp(prefix=f".{LIBRARY_NAME}.", dir=output_dir)
    os.close(fd)
    cmd = [
        cc,
        *CFLAGS,
        *extra_flags,
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-o",
        tmp,
        *(str(SOURCE_DIR / name) for name in SOURCES),
        "-ldl",
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building {LIBRARY_NAME} failed:\n{' '.join(cmd)}\n{result.stderr}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def library_path() -> Path:
    """The shim library to preload (see the module docstring)."""
    from secureml.core.contract import ENV_SHIM_LIBRARY
    from secureml.core.errors import SecuremlError

    override = os.environ.get(ENV_SHIM_LIBRARY)
    candidate = Path(override) if override else Path(__file__).resolve().parent / LIBRARY_NAME
    if candidate.is_file():
        return candidate
    where = f"{ENV_SHIM_LIBRARY}={override}" if override else str(candidate)
    raise SecuremlError(
        f"the GPU quota shim {LIBRARY_NAME} is not built",
        why="a time-sliced GPU step needs the shim preloaded to enforce its memory and compute limits",
        fix="install a C compiler (cc/gcc) and reinstall secureml (`pip install .`), or run "
        "`python -m secureml.enforcement.shim_control build`",
        where=where,
    )


def child_env(
    limits_file: str | os.PathLike[str],
    counters_file: str | os.PathLike[str] | None = None,
    base_env: Mapping[str, str] | None = None,
    *,
    log_level: str | None = None,
    preload: bool = True,
) -> dict[str, str]:
    """Environment that arms the shim in a child process (see the module docstring). With
    `preload=False` LD_PRELOAD is left alone: the shim is already preloaded into every process (in
    a cluster, by /etc/ld.so.preload), and a second copy would only be loaded beside it."""
    from secureml.core import contract

    env = dict(os.environ if base_env is None else base_env)
    if preload:
        first = str(library_path())
        rest = [
            item
            for item in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
            if item and item != first
        ]
        env["LD_PRELOAD"] = ":".join([first, *rest])
    env[contract.ENV_SHIM_LIMITS_FILE] = str(limits_file)
    if counters_file is not None:
        env[contract.ENV_SHIM_COUNTERS_FILE] = str(counters_file)
    else:
        env.pop(contract.ENV_SHIM_COUNTERS_FILE, None)
    if log_level is not None:
        if log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        env[contract.ENV_SHIM_LOG_LEVEL] = log_level
    return env


def read_counters(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse the shim's counters file.

    Returns `{"limits_ok": bool, "error": str | None, "memory_limit": int, "compute_limit": int,
    "scrub_on_free": bool, "refused": int, "peak": int, "throttled": int, "scrub_failures": int,
    "reclaimed": int (bytes of gone processes released once the driver had freed them),
    "firewall": bool (the CUDA firewall is on), "firewall_refused": int (imports and peer accesses
    it refused),
    "launcher_pid": int (0: no launcher claimed the step's region), "launcher_claims_refused": int,
    "devices": [{"uuid", "used", "peak", "refused", "throttled"}, ...]}`. Raises SecuremlError when
    the file is missing (no process of the step ever used the GPU, or the step removed it) or
    unreadable.
    """
    from secureml.core.errors import SecuremlError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SecuremlError(
            "the shim wrote no counters",
            why=f"{exc.strerror or exc}",
            fix="check that the step ran under the shim and that it used the GPU",
            where=str(path),
        ) from None
    raw: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            raise SecuremlError(
                "malformed shim counters file",
                why=f"line {line!r} is not key=value",
                where=str(path),
            )
        raw[key] = value
    try:
        devices = [
            {
                "uuid": raw[f"device.{i}.uuid"],
                **{
                    name: int(raw[f"device.{i}.{name}"])
                    for name in ("used", "peak", "refused", "throttled")
                },
            }
            for i in range(int(raw.get("devices", "0")))
        ]
        return {
            "limits_ok": raw["limits_ok"] == "1",
            "error": raw.get("error"),
            "memory_limit": int(raw["memory_limit"]),
            "compute_limit": int(raw["compute_limit"]),
            "scrub_on_free": raw["scrub_on_free"] == "1",
            "refused": int(raw["refused"]),
            "peak": int(raw["peak"]),
            "throttled": int(raw["throttled"]),
            "scrub_failures": int(raw["scrub_failures"]),
            "reclaimed": int(raw.get("reclaimed", "0")),
            "firewall": raw.get("firewall") == "1",
            "firewall_refused": int(raw.get("firewall_refused", "0")),
            "launcher_pid": int(raw["launcher_pid"]),
            "launcher_claims_refused": int(raw["launcher_claims_refused"]),
            "devices": devices,
        }
    except (KeyError, ValueError) as exc:
        raise SecuremlError(
            "malformed shim counters file", why=f"missing or bad field {exc}", where=str(path)
        ) from None


def interposed() -> ctypes.CDLL | None:
    """The shim as it interposes in this process (LD_PRELOAD, /etc/ld.so.preload), found by its
    exported mode query in the global symbol scope; None when no shim interposes here."""
    scope = ctypes.CDLL(None)
    return scope if hasattr(scope, MODE_FUNCTION) else None


def mapped_copies() -> list[str]:
    """Paths of every shim library mapped into this process (from /proc/self/maps)."""
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
                path = fields[5].strip() if len(fields) == 6 else ""
                if (
                    Path(path).name.startswith(LIBRARY_NAME.removesuffix(".so"))
                    and path not in found
                ):
                    found.append(path)
    except OSError:
        pass
    return found


def enforcing_here() -> bool:
    """Whether the shim limits this process: it interposes here and this process is not the
    step's launcher. A shim mapped here that cannot be asked (a build without the mode query,
    mapped by the loader) is taken to enforce; the launcher's own private copy does not."""
    shim = interposed()
    if shim is not None:
        mode = getattr(shim, MODE_FUNCTION)
        mode.restype, mode.argtypes = ctypes.c_int, []
        return int(mode()) != MODE_LAUNCHER
    return any(os.path.realpath(path) not in _private_copies for path in mapped_copies())


def claim_launcher(limits_file: str | os.PathLike[str]) -> dict[str, Any]:
    """Take the launcher role in the step's accounting region for this process (see the module
    docstring); raise SecuremlError when the shim refuses it.

    Where the shim interposes here, the claim goes to that copy: from then on it passes this
    process's calls through. Otherwise the shim is loaded privately (RTLD_LOCAL: its hooks do not
    apply here) only to record the claim, reading `limits_file` as the step's processes will.
    Call it before this process makes any CUDA or NVML call and before it starts the step.
    """
    from secureml.core import contract
    from secureml.core.errors import SecuremlError

    shim = interposed()
    if shim is not None:
        how = "preloaded"
        library = next(iter(mapped_copies()), "")
    else:
        how = "private"
        path = library_path()
        os.environ[contract.ENV_SHIM_LIMITS_FILE] = str(limits_file)  # what its one-time init reads
        shim = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
        library = os.path.realpath(path)
        _private_copies.add(library)
    try:
        claim = getattr(shim, CLAIM_FUNCTION)
    except AttributeError:
        raise SecuremlError(
            f"the shim {library} cannot hand the launcher its role",
            why=f"it does not export {CLAIM_FUNCTION}: it is older than this launcher",
            fix="rebuild the image with the shim of the same secureml release",
            where=library,
        ) from None
    claim.restype, claim.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]
    reason = ctypes.create_string_buffer(512)
    if claim(reason, len(reason)) != 0:
        raise SecuremlError(
            "the shim refused this launcher its role",
            why=reason.value.decode(errors="replace"),
            fix="the launcher must be the first process of the step to use the shim: look for a process "
            "that started before it, or a stale accounting region left by an earlier run "
            f"({_region_hint(limits_file)}); check the limits file",
            where=library,
        )
    return {
        "claimed": True,
        "how": how,
        "library": library,
        "pid": os.getpid(),
        "dumpable": _make_undumpable(),
    }


PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def _make_undumpable() -> bool:
    """Mark this process non-dumpable: a process of the same user without CAP_SYS_PTRACE can then
    neither ptrace it nor open its /proc/<pid>/mem, so the step cannot make the pass-through launcher
    act for it. Returns whether the process is still dumpable (False once it worked)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.restype = ctypes.c_int
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return bool(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


def _region_hint(limits_file: str | os.PathLike[str]) -> str:
    try:
        return str(region_path(limits_file))
    except OSError as exc:
        return f"none: {limits_file}: {exc.strerror or exc}"


def region_path(limits_file: str | os.PathLike[str]) -> Path:
    """The shared accounting region of the step whose limits are `limits_file` (same rule as the C
    side: named after the file's device, inode and modification time, in /dev/shm)."""
    st = os.stat(limits_file)
    shm = Path("/dev/shm")
    folder = shm if os.access(shm, os.W_OK | os.X_OK) else Path("/tmp")
    return folder / f"secureml-shim-{os.geteuid()}-{st.st_dev:x}-{st.st_ino:x}-{st.st_mtime_ns:x}"


def remove_region(limits_file: str | os.PathLike[str]) -> None:
    """Delete the step's accounting region (after the step; a missing region is fine)."""
    try:
        region_path(limits_file).unlink()
    except FileNotFoundError:
        pass


def _main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "build":
        output = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
        try:
            print(build(output))
        except RuntimeError as exc:
            print(f"secureml: {exc}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m secureml.enforcement.shim_control build [OUTPUT_DIR]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
