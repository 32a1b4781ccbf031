"""The simulated GPU: a fake `libcuda.so.1` and `libnvidia-ml.so.1`, built and configured.

`secureml run --local --simulate-gpu` runs the launcher's GPU stages against them, and the test
suite uses them to test the shim, the scrub and the preflight without a GPU. The fakes are C
sources shipped with this package (`shim/fake/`, configuration format in its README.md), compiled
on first use with the system compiler into a cache keyed by the sources' content
(`SECUREML_SIMULATOR_BUILD_DIR`, default `$XDG_CACHE_HOME/secureml/simulator` or
`~/.cache/secureml/simulator`), so repeated runs and parallel test workers rebuild only when a
source changes.

A caller describes the machine it wants with `FakeGPU(directory, [FakeDevice(...)], ...)`, then
runs the code under test in a subprocess with `gpu.env()`: the fake driver is found through
LD_LIBRARY_PATH and reads its configuration from SECUREML_FAKE_GPU_CONFIG. Every process using the
same FakeGPU shares its device memory and its allocation table, so `gpu.stats()` reports what all
of them really used, counted by the fake.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "shim"
FAKE_DIR = SHIM_DIR / "fake"
BUILD_DIR_ENV = "SECUREML_SIMULATOR_BUILD_DIR"
CONFIG_ENV = "SECUREML_FAKE_GPU_CONFIG"
MiB = 1 << 20
GiB = 1 << 30

_BASE_CFLAGS = ("-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-Werror")


def build_dir() -> Path:
    """Where compiled fakes are cached (see the module docstring)."""
    configured = os.environ.get(BUILD_DIR_ENV)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "secureml" / "simulator"


def compiler() -> str | None:
    """The C compiler tests use (`$CC`, else `cc`/`gcc`/`clang`), or None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build_native(
    name: str,
    sources: list[Path],
    *,
    shared: bool = False,
    flags: tuple[str, ...] = (),
    headers: tuple[Path, ...] = (),
    libs: tuple[str, ...] = (),
) -> Path:
    """Compile `sources` into `<cache>/<key>/<name>` and return its path.

    The key hashes the compiler, flags and the content of sources and headers, so a changed source
    gives a new build while an unchanged one is reused. The output is written under a temporary
    name and renamed into place, which is atomic: concurrent builders never see half a file.
    """
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC or install cc/gcc/clang)")
    all_flags = (
        _BASE_CFLAGS
        + (("-shared", "-fPIC", "-fvisibility=hidden") if shared else ())
        + tuple(flags)
    )
    digest = hashlib.sha256()
    digest.update(f"{cc}\0{name}\0{' '.join(all_flags)}\0{' '.join(libs)}".encode())
    for path in [*sources, *headers]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    out_dir = build_dir() / digest.hexdigest()[:20]
    target = out_dir / name
    if target.exists():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
    os.close(fd)
    try:
        cmd = [cc, *all_flags, "-o", tmp, *map(str, sources), *libs]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {name} failed:\n{' '.join(cmd)}\n{result.stderr}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _headers() -> tuple[Path, ...]:
    return (
        SHIM_DIR / "cuda_api.h",
        SHIM_DIR / "nvml_api.h",
        FAKE_DIR / "fake_common.h",
        FAKE_DIR / "fake_nvml_events.h",
    )


def build_fake_libs() -> Path:
    """Build both fakes; return the folder holding `libcuda.so.1` and `libnvidia-ml.so.1`."""
    cuda = build_native(
        "libcuda.so.1",
        [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic"),
        headers=_headers(),
    )
    nvml = build_native(
        "libnvidia-ml.so.1",
        [FAKE_DIR / "fake_nvml.c", FAKE_DIR / "fake_nvml_events.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libnvidia-ml.so.1", "-Wl,-Bsymbolic"),
        headers=_headers(),
    )
    # One folder with both names, so a single LD_LIBRARY_PATH entry finds both.
    key = hashlib.sha256(f"{cuda}\0{nvml}".encode()).hexdigest()[:20]
    lib_dir = build_dir() / f"fakegpu-{key}"
    if not (lib_dir / "libnvidia-ml.so.1").exists():
        staging = Path(tempfile.mkdtemp(prefix=".fakegpu.", dir=build_dir()))
        for lib in (cuda, nvml):
            os.symlink(lib, staging / lib.name)
            # Loaders that ask for the unversioned names (ctypes.util, some bindings) find them too.
            os.symlink(lib, staging / lib.name.removesuffix(".1"))
        try:
            os.replace(staging, lib_dir)
        except OSError:  # another worker won the race; its folder is identical
            shutil.rmtree(staging, ignore_errors=True)
    return lib_dir


@dataclass
class FakeMig:
    """One MIG instance of a fake device."""

    profile: str = "1g.10gb"
    memory: int = 64 * MiB
    uuid: str = field(default_factory=lambda: f"MIG-{uuidlib.uuid4()}")
    gi: int = 1
    ci: int = 0


@dataclass
class FakeDevice:
    """One fake GPU. `residue` plants that byte in all of its device memory when first used."""

    name: str = "NVIDIA A100-SXM4-80GB"
    memory: int = 256 * MiB
    uuid: str = field(default_factory=lambda: f"GPU-{uuidlib.uuid4()}")
    compute_capability: tuple[int, int] = (8, 0)
    sms: int = 108
    mig_mode: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    residue: int | None = None
    retired_pages_sbe: int = 0
    retired_pages_dbe: int = 0
    retired_pages_pending: bool = False
    remapped_rows_corr: int = 0
    remapped_rows_unc: int = 0
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False
    xids: list[int] = field(default_factory=list)
    persistence_mode: bool = True
    ecc_mode: bool = True
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0


@dataclass
class FakeConfidential:
    """The machine's confidential-computing state as NVML reports it (system-wide).

    `mode` is off / on / devtools (`nvmlSystemGetConfComputeState`'s ccFeature and devToolsMode);
    `ready` is whether the GPUs accept work (`...GpusReadyState`); `capable` whether they are
    CC-capable and `cpu` the CPU's CC capability (`...Capabilities`: 0 none, 1 SEV, 2 TDX, 3 SEV-SNP).
    """

    mode: str = "off"
    ready: bool = False
    capable: bool = False
    cpu: int = 0
    multi_gpu: int = 0

    def render(self) -> str:
        environment = 2 if self.capable else 0  # NVML_CC_SYSTEM_ENVIRONMENT_PROD / UNAVAILABLE
        return (
            f"confidential mode={self.mode} ready={int(self.ready)} capable={int(self.capable)}"
            f" cpu={self.cpu} multigpu={self.multi_gpu} environment={environment}"
        )


@dataclass
class FakeProcess:
    """A process the fake NVML reports as running (it holds no fake memory; it reduces free memory)."""

    pid: int
    used: int
    device: int = 0
    mig: int | None = None


def _quote(text: str) -> str:
    if any(c in text for c in '"\n'):
        raise ValueError(f"fake GPU config values may not contain quotes or newlines: {text!r}")
    return f'"{text}"'


class _Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "total",
            "used",
            "peak",
            "allocs",
            "frees",
            "failed",
            "live_blocks",
            "launches",
            "busy_ns",
            "now_ns",
            "util_percent",
        )
    ]


def _inspector() -> ctypes.CDLL:
    """The fake driver built under another soname, for reading stats inside the test process
    without making `libcuda.so.1` resolvable there (a later dlopen of it must not find the fake)."""
    path = build_native(
        "libfakegpu-inspect.so",
        [FAKE_DIR / "fake_cuda.c", FAKE_DIR / "fake_common.c"],
        shared=True,
        flags=("-Wl,-soname,libfakegpu-inspect.so", "-Wl,-Bsymbolic"),
        headers=_headers(),
    )
    return ctypes.CDLL(str(path))


class FakeGPU:
    """A configured fake GPU machine rooted in `directory` (config, shared state, device memory)."""

    def __init__(
        self,
        directory: Path,
        devices: list[FakeDevice] | None = None,
        *,
        processes: list[FakeProcess] | None = None,
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        kernel_us: int = 100,
        queue_depth: int = 1024,
        util_window_ms: int = 100,
        fail_cuinit: int | None = None,
        fail_nvmlinit: int | None = None,
        fail_alloc_after: int | None = None,
        teardown_ms: int = 0,
        call_ns: int = 0,
        nvml_pid_offset: int = 0,
        confidential: FakeConfidential | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.devices = devices if devices is not None else [FakeDevice()]
        self.processes = processes or []
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.kernel_us = kernel_us
        self.queue_depth = queue_depth
        self.util_window_ms = util_window_ms
        self.fail_cuinit = fail_cuinit
        self.fail_nvmlinit = fail_nvmlinit
        self.fail_alloc_after = fail_alloc_after
        self.teardown_ms = teardown_ms
        self.call_ns = call_ns
        self.nvml_pid_offset = nvml_pid_offset
        self.confidential = confidential or FakeConfidential()
        self.lib_dir = build_fake_libs()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path = self.directory / "fakegpu.conf"
        self.write()

    def render(self) -> str:
        """The configuration file's text."""
        lines = [
            f"driver version={self.driver_version} cuda={self.cuda_version}"
            f" teardown_ms={self.teardown_ms} call_ns={self.call_ns} nvml_pid_offset={self.nvml_pid_offset}",
            f"launch kernel_us={self.kernel_us} queue={self.queue_depth} util_window_ms={self.util_window_ms}",
        ]
        fail = {
            "cuinit": self.fail_cuinit,
            "nvmlinit": self.fail_nvmlinit,
            "alloc_after": self.fail_alloc_after,
        }
        fail_words = [f"{k}={v}" for k, v in fail.items() if v is not None]
        if fail_words:
            lines.append("fail " + " ".join(fail_words))
        lines.append(self.confidential.render())
        for index, dev in enumerate(self.devices):
            words = [
                "device",
                f"name={_quote(dev.name)}",
                f"memory={dev.memory}",
                f"uuid={dev.uuid}",
                f"cc={dev.compute_capability[0]}.{dev.compute_capability[1]}",
                f"sms={dev.sms}",
                f"mig={int(dev.mig_mode)}",
                f"retired_sbe={dev.retired_pages_sbe}",
                f"retired_dbe={dev.retired_pages_dbe}",
                f"retired_pending={int(dev.retired_pages_pending)}",
                f"remapped_corr={dev.remapped_rows_corr}",
                f"remapped_unc={dev.remapped_rows_unc}",
                f"remapped_pending={int(dev.remapped_rows_pending)}",
                f"remapped_failure={int(dev.remapped_rows_failure)}",
                f"persistence={int(dev.persistence_mode)}",
                f"ecc={int(dev.ecc_mode)}",
                f"ecc_corrected={dev.ecc_corrected}",
                f"ecc_uncorrected={dev.ecc_uncorrected}",
            ]
            if dev.residue is not None:
                words.append(f"residue={dev.residue}")
            if dev.xids:
                words.append("xid=" + ",".join(str(x) for x in dev.xids))
            lines.append(" ".join(words))
            for mig in dev.migs:
                lines.append(
                    f"mig device={index} profile={mig.profile} memory={mig.memory} uuid={mig.uuid} gi={mig.gi} ci={mig.ci}"
                )
        for proc in self.processes:
            on_mig = f" mig={proc.mig}" if proc.mig is not None else ""
            lines.append(f"process device={proc.device}{on_mig} pid={proc.pid} used={proc.used}")
        return "\n".join(lines) + "\n"

    def write(self) -> Path:
        """(Re)write the configuration; processes started afterwards see the change."""
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(self.render())
        os.replace(tmp, self.config_path)
        return self.config_path

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a subprocess that should see this fake GPU instead of a real driver."""
        env = dict(os.environ if base is None else base)
        previous = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{self.lib_dir}:{previous}" if previous else str(self.lib_dir)
        env[CONFIG_ENV] = str(self.config_path)
        return env

    def _slot_args(self, device: int, mig: int | None) -> tuple[int, int]:
        if not 0 <= device < len(self.devices):
            raise IndexError(f"no fake device {device}")
        if mig is not None and not 0 <= mig < len(self.devices[device].migs):
            raise IndexError(f"fake device {device} has no MIG instance {mig}")
        return device, -1 if mig is None else mig

    def stats(self, device: int = 0, mig: int | None = None) -> dict[str, int]:
        """Counters kept by the fake itself for one device (or MIG instance), over all processes:
        total, used, peak (bytes, in 512-byte units), allocs, frees, failed, live_blocks, launches,
        busy_ns (simulated kernel time executed so far), now_ns (CLOCK_MONOTONIC), util_percent."""
        dev, mig_index = self._slot_args(device, mig)
        fn = _inspector().fakegpu_read_stats
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Stats)]
        fn.restype = ctypes.c_int
        out = _Stats()
        if fn(str(self.config_path).encode(), dev, mig_index, ctypes.byref(out)) != 0:
            raise RuntimeError(f"fake GPU stats unavailable for {self.config_path}")
        return {name: getattr(out, name) for name, *_ in _Stats._fields_}

    def inject_xid(
        self,
        xid: int,
        device: int = 0,
        *,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> None:
        """Report a critical Xid on `device` now: every NVML event set registered for it receives
        it once (`nvmlEventSetWait_v2`), as from the real driver (README.md, "Injecting Xid events")."""
        self._slot_args(device, None)
        words = [f"device={device}", f"xid={xid}"]
        if gpu_instance is not None:
            words.append(f"gi={gpu_instance}")
        if compute_instance is not None:
            words.append(f"ci={compute_instance}")
        # one short append: whole lines reach the readers, never half of one
        fd = os.open(f"{self.config_path}.xid", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (" ".join(words) + "\n").encode())
        finally:
            os.close(fd)

    def memory_path(self, device: int = 0, mig: int | None = None) -> Path:
        """The file holding the device's memory (exists once a process has used the fake)."""
        dev, mig_index = self._slot_args(device, mig)
        if mig_index < 0:
            slot = dev
        else:
            slot = 8 + sum(len(d.migs) for d in self.devices[:dev]) + mig_index
        return Path(f"{self.config_path}.mem{slot}")

    def read_memory(
        self, device: int = 0, mig: int | None = None, offset: int = 0, size: int | None = None
    ) -> bytes:
        """Raw device memory (what the next tenant would find), straight from the fake's file."""
        with open(self.memory_path(device, mig), "rb") as handle:
            handle.seek(offset)
            return handle.read(-1 if size is None else size)

    @staticmethod
    def offset_of(device_pointer: int) -> int:
        """Offset into device memory of a pointer the fake returned."""
        return device_pointer & ((1 << 40) - 1)
