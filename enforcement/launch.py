"""The in-pod launcher: `python3 -m secureml.enforcement.launch -- <command...>`.

Stages, in order, each timed and recorded: config, shim-claim, identity, verify-inputs, preflight,
scrub-before, shim, run (with the watchdog beside it), scrub-after, audit. shim-claim runs where the quota shim is
preloaded into the launcher itself (in a cluster, /etc/ld.so.preload): the launcher takes its role
in the shim before any GPU call, so that its own GPU work is not limited while the step's is. A required control that fails stops the step
with that stage's exit code (`ExitCode`); an optional one that fails is warned about and recorded.
A step without a GPU skips the GPU stages and says so in its record. docs/launcher.md is the
reference for every variable, exit code and rule.

Start-up stays cheap: grpc/spiffe (identity), pynvml (preflight, watchdog) and the shim helper are
imported only by the stage that needs them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from pathlib import Path
from typing import Any

from secureml.core import contract
from secureml.core.errors import SecuremlError
from secureml.gpu.request import TimeSlice

from . import driver
from .audit import (
    AUDIT_SCHEMA,
    AuditError,
    AuditRecord,
    StageRecord,
    audit_file_name,
    emit_audit_line,
    write_audit_record,
)
from .config import LauncherConfig, load_config, read_shim_limits

LOG_PREFIX = "secureml-launch: "
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


class ExitCode(IntEnum):
    """The launcher's own exit codes; any other code is the step's own."""

    USAGE = 64
    CONFIG = 70
    IDENTITY = 71
    PREFLIGHT = 72
    SCRUB_BEFORE = 73
    SHIM = 74
    WATCHDOG = 75
    SCRUB_AFTER = 76
    AUDIT = 77
    VERIFY_INPUTS = 78
    DEVICE_FAULT = 79
    NOT_EXECUTABLE = 126
    NOT_FOUND = 127


def _log(message: str) -> None:
    sys.stderr.write("".join(LOG_PREFIX + line + "\n" for line in message.splitlines()))
    sys.stderr.flush()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


# What the injected entry (images/runtime-injector/launch.c) moves aside for the launcher: the
# variables that make the C library or OpenSSL load code or files the step's image names. It
# passes each as STEP_ENV_PREFIX<NAME>=<value> and runs the launcher with LAUNCHER_ONLY_ENV; the
# step gets its own values back, and the launcher's overrides only where the image set them.
STEP_ENV_PREFIX = "SECUREML_STEP_ENV_"
MOVED_ASIDE = ("GCONV_PATH", "LOCPATH", "NLSPATH", "LANG", "LANGUAGE", "LC_*", "OPENSSL_*",
               "GLIBC_TUNABLES")  # fmt: skip
LAUNCHER_ONLY_ENV = ("LC_ALL", "OPENSSL_CONF")


def _moved_aside(name: str) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in MOVED_ASIDE)


def step_environment(environ: Mapping[str, str], *, injected: bool) -> dict[str, str]:
    """The step's environment. Under the injected entry (`injected`): the launcher's, less
    LAUNCHER_ONLY_ENV, with what the entry moved aside given back (MOVED_ASIDE names only: nothing
    else passes through the prefix). Otherwise the launcher's as it is."""
    if not injected:
        return dict(environ)
    env = {
        k: v
        for k, v in environ.items()
        if not k.startswith(STEP_ENV_PREFIX) and k not in LAUNCHER_ONLY_ENV
    }
    for key, value in environ.items():
        name = key.removeprefix(STEP_ENV_PREFIX)
        if key.startswith(STEP_ENV_PREFIX) and _moved_aside(name):
            env[name] = value
    return env


class StepRun:
    """One run of the launcher: the stages done so far, the first failure, the record."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.run_id = os.urandom(6).hex()
        self.started_at = _now()
        self.started = time.perf_counter()
        self.stages: list[StageRecord] = []
        self.exit_code: int | None = None  # the first failed stage's code
        self.child_exit_code: int | None = None
        self.child_env = step_environment(os.environ, injected=driver.injected())
        self.record: AuditRecord = {}
        self.pending_signal: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.shim_files: tuple[Path, Path] | None = None  # (limits file, counters file) once armed

    @property
    def failed(self) -> bool:
        return self.exit_code is not None or self.pending_signal is not None

    def skip(self, name: str, reason: str) -> None:
        self.stages.append({"name": name, "status": "skipped", "reason": reason, "seconds": 0.0})

    def stage(
        self, name: str, code: ExitCode, required: bool, action: Callable[[], dict[str, Any]]
    ) -> dict[str, Any] | None:
        """Run one stage, time it, record it; a failure of a required stage sets the exit code."""
        started = time.perf_counter()
        entry: StageRecord = {"name": name, "required": required}
        try:
            detail = action()
        except Exception as err:  # noqa: BLE001 - a stage that breaks unexpectedly fails like one that refuses
            message = (
                err.diagnostics()
                if isinstance(err, SecuremlError)
                else f"unexpected {type(err).__name__}: {err}"
            )
            entry["status"] = "failed" if required else "warning"
            entry["error"] = message
            detail = None
            verdict = "failed" if required else "failed (optional, continuing)"
            _log(f"stage {name} {verdict}:\n{message}")
            if required and self.exit_code is None:
                self.exit_code = int(code)
        else:
            entry["status"] = "ok"
            entry["detail"] = detail
        entry["seconds"] = round(time.perf_counter() - started, 6)
        self.stages.append(entry)
        return detail

    # --- signals ---------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.child is not None and self.child.returncode is None:
            try:
                os.killpg(self.child.pid, signum)
            except ProcessLookupError:
                pass
        elif self.pending_signal is None:
            self.pending_signal = signum  # no child yet: stop before starting it


# --- stages ---------------------------------------------------------------------------------------


def identity_stage(run: StepRun, config: LauncherConfig) -> None:
    required = config.identity_required
    if not config.expected_spiffe_id:
        run.skip("identity", "no expected SPIFFE ID for this step")
        return
    if not config.spiffe_socket and not required:
        run.skip("identity", f"optional and {contract.SPIFFE_SOCKET_ENV} is not set")
        return

    def check() -> dict[str, Any]:
        if not config.spiffe_socket:
            raise SecuremlError(
                f"{contract.SPIFFE_SOCKET_ENV} is not set; cannot prove the identity "
                f"{config.expected_spiffe_id}",
                why="the profile requires every step to hold its SPIFFE identity",
                fix="mount the SPIFFE Workload API socket (the tenant bundle's mutating policy adds "
                "it in a cluster; `secureml run --dev-identity` locally)",
                where=contract.SPIFFE_SOCKET_ENV,
            )
        import tempfile

        from .identity import fetch_and_check_identity

        parent = config.identity_dir
        if parent is not None:
            parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        out_dir = Path(tempfile.mkdtemp(prefix="secureml-svid-", dir=parent))
        result = fetch_and_check_identity(
            config.expected_spiffe_id, config.spiffe_socket, out_dir, config.identity_timeout_s
        )
        run.child_env.update(result.env)
        run.record["spiffe_id"] = result.spiffe_id
        return result.to_record()

    run.stage("identity", ExitCode.IDENTITY, required, check)


def verify_inputs_stage(run: StepRun, config: LauncherConfig) -> None:
    """The inputs the step verifies carry a valid model signature by a trusted signer and are
    unchanged (`verify_inputs.verify_step_inputs`); the step reads what was verified from the
    read-only file named by `SECUREML_VERIFIED_INPUTS`."""

    def verify() -> dict[str, Any]:
        from .verify_inputs import verify_step_inputs

        entries: list[dict[str, Any]] = []
        run.record["inputs"] = entries
        result = verify_step_inputs(config.verify_inputs, config.model_trust, run.command, entries)
        run.child_env[contract.ENV_VERIFIED_INPUTS] = str(result)
        for entry in entries:
            _log(f"verified input {entry['input']}: {entry['digest']} signed by {entry['signer']}")
        return {"inputs": [e["input"] for e in entries], "file": str(result)}

    run.stage("verify-inputs", ExitCode.VERIFY_INPUTS, True, verify)


def preflight_stage(run: StepRun, config: LauncherConfig) -> None:
    from .preflight import run_preflight

    assert config.gpu_request is not None
    gpu = run.stage(
        "preflight",
        ExitCode.PREFLIGHT,
        True,
        lambda: run_preflight(
            config.gpu_request,  # type: ignore[arg-type]
            isolation=config.isolation,
            confidential_computing=config.confidential_computing,
        ),
    )
    if gpu is not None:
        run.record["gpu"] = gpu


def scrub_stage(run: StepRun, config: LauncherConfig, name: str, code: ExitCode) -> None:
    from .scrub import scrub_devices

    run.stage(name, code, True, lambda: scrub_devices(config.scrub_verify))


def claim_stage(run: StepRun, config: LauncherConfig) -> None:
    """The shim is preloaded into this process: take the launcher's role (pass-through here,
    refused to every other process) before any CUDA or NVML call."""

    def claim() -> dict[str, Any]:
        from . import shim_control as shim

        detail = shim.claim_launcher(effective_limits_file(config))
        run.record["shim_launcher"] = detail
        return detail

    run.stage("shim-claim", ExitCode.SHIM, config.uses_gpu, claim)


def effective_limits_file(config: LauncherConfig) -> Path:
    """The limits file the shim will read: the compiled-in cluster path wins where it exists."""
    cluster = Path(contract.SHIM_LIMITS_PATH)
    return cluster if cluster.exists() else config.shim_limits_file


def shim_stage(run: StepRun, config: LauncherConfig) -> None:
    """Arm the shim for the step after checking its limits. Where the shim is not preloaded into
    this process, the launcher still takes its role in the step's region first (a private copy,
    not interposed), so that no step process can take it."""

    def arm() -> dict[str, Any]:
        import tempfile

        from . import shim_control as shim

        request = config.gpu_request
        assert isinstance(request, TimeSlice)
        limits_file = effective_limits_file(config)
        limits = read_shim_limits(limits_file)
        if (limits.memory, limits.compute) != (request.memory, request.compute):
            raise SecuremlError(
                f"the shim limits (memory={limits.memory}, compute={limits.compute}) differ from "
                f"the step's GPU request (memory={request.memory}, compute={request.compute})",
                why="the limits file and the request come from the same compiled task; a difference "
                "means one of them was changed after compilation",
                fix="recompile the pipeline and re-apply the tenant bundle; do not edit either by hand",
                where=str(limits_file),
            )
        preloaded = shim.interposed() is not None
        if preloaded:  # every process of the container loads it; the launcher claimed already
            library = run.record["shim_launcher"]["library"]
        else:
            library = str(shim.library_path())
            run.record["shim_launcher"] = shim.claim_launcher(limits_file)
        counters = Path(tempfile.mkdtemp(prefix="secureml-shim-")) / "counters"
        run.child_env = shim.child_env(limits_file, counters, run.child_env, preload=not preloaded)
        run.shim_files = (limits_file, counters)
        run.record["limits"] = {**limits.to_json(), "source": str(limits_file)}
        return {
            "library": library,
            "preloaded": preloaded,
            "limits_file": str(limits_file),
            "limits": limits.to_json(),
            "counters_file": str(counters),
        }

    run.stage("shim", ExitCode.SHIM, True, arm)


def collect_shim_counters(run: StepRun) -> None:
    """After the step: the shim's counters into the record, its accounting region removed."""
    if run.shim_files is None:
        return
    from . import shim_control as shim

    limits_file, counters = run.shim_files
    try:
        counted = run.record["shim_counters"] = shim.read_counters(counters)
    except SecuremlError as err:  # e.g. the step never touched the GPU: nothing was counted
        run.record["shim_counters"] = None
        run.record["shim_counters_error"] = err.what
    else:
        if counted["launcher_claims_refused"]:
            run.record.setdefault("violations", []).append(
                {
                    "kind": "shim-launcher-claim",
                    "count": counted["launcher_claims_refused"],
                    "launcher_pid": counted["launcher_pid"],
                    "action": "refused",
                }
            )
            _log(
                f"shim: {counted['launcher_claims_refused']} claim(s) of the launcher's role by the "
                "step's processes were refused"
            )
        record_firewall_refusals(run, counted)
    shim.remove_region(limits_file)
    # the counters file lives in a private folder of its own (shim_stage's mkdtemp): both go
    with contextlib.suppress(OSError):
        counters.unlink(missing_ok=True)
        counters.parent.rmdir()


def record_firewall_refusals(run: StepRun, counted: dict[str, Any]) -> None:
    """The CUDA firewall's refusals into the record: always the count, a violation when any.

    The step is not failed for them: the shim already refused each import or peer access (nothing
    crossed), and the step's own code sees the CUDA error. The violation is the evidence that a
    step tried to reach memory outside its account (docs/audit.md).
    """
    refused = int(counted.get("firewall_refused", 0))
    run.record["firewall_refused"] = refused
    if refused:
        run.record.setdefault("violations", []).append(
            {"kind": "cuda-firewall", "count": refused, "action": "refused"}
        )
        _log(
            f"shim: the CUDA firewall refused {refused} import(s) or peer access(es) from outside "
            "the step"
        )


def run_child(run: StepRun, config: LauncherConfig) -> None:
    """Start the command, watch it, wait for it; record its exit code and the watchdog's findings."""
    started = time.perf_counter()
    entry: StageRecord = {"name": "run", "required": True}
    listener = None
    if config.uses_gpu:  # registered before the step starts: every Xid while it runs counts
        from .xid_events import XidListener

        listener = XidListener()
        listener.start()
    try:
        run.child = subprocess.Popen(run.command, env=run.child_env, start_new_session=True)
    except (FileNotFoundError, PermissionError) as err:
        missing = isinstance(err, FileNotFoundError)
        run.child_exit_code = int(ExitCode.NOT_FOUND if missing else ExitCode.NOT_EXECUTABLE)
        entry.update(
            {"status": "failed", "error": f"cannot start {run.command[0]!r}: {err.strerror}"}
        )
        _log(entry["error"])
    else:
        if run.pending_signal is not None:  # it arrived while the child was being started
            os.killpg(run.child.pid, run.pending_signal)
        watchdog = None
        if config.uses_gpu:
            from .watchdog import Watchdog

            limit = config.gpu_request.memory if isinstance(config.gpu_request, TimeSlice) else None
            watchdog = Watchdog(
                run.child,
                limit_bytes=limit,
                interval_s=config.watchdog_interval_s,
                grace_s=config.watchdog_grace_s,
            )
            watchdog.start()
            if listener is not None:
                listener.deliver_to(watchdog.device_fault)
        returncode = run.child.wait()
        run.child_exit_code = returncode if returncode >= 0 else 128 - returncode
        entry.update(
            {"status": "ok" if returncode == 0 else "failed", "exit_code": run.child_exit_code}
        )
        if returncode < 0:
            entry["signal"] = signal.Signals(-returncode).name
        if watchdog is not None:
            watchdog.stop()
            run.record["pids"] = sorted(watchdog.pids)
            run.record["peak_gpu_memory_bytes"] = watchdog.peak_bytes
            run.record["violations"] = watchdog.violations
            entry["watchdog"] = {
                "limit_bytes": watchdog.limit_bytes,
                "samples": watchdog.samples,
                "peak_bytes": watchdog.peak_bytes,
                "error": watchdog.error,
            }
            if watchdog.violations:
                _log(_watchdog_message(watchdog.violations[0]))
                if run.exit_code is None:
                    run.exit_code = int(ExitCode.WATCHDOG)
        run.record.setdefault("pids", [run.child.pid])
    if listener is not None:
        from .xid_events import record_events

        if record_events(run.record, entry, listener):
            run.exit_code = int(ExitCode.DEVICE_FAULT)  # over the watchdog's 75: the device failed
    entry["seconds"] = round(time.perf_counter() - started, 6)
    run.stages.append(entry)


def _watchdog_message(violation: dict[str, Any]) -> str:
    if violation["kind"] == "device-fault":
        return (
            f"watchdog: the GPU {violation['device']} reported Xid {violation['xid']} "
            f"({violation['class']}): its memory can no longer be trusted; the step was stopped"
        )
    if violation["kind"] == "watchdog-lost":
        return (
            f"watchdog: NVML stopped answering ({violation['error']}), so the GPU memory limit of "
            f"{violation['limit_bytes']} bytes could no longer be checked; the step was stopped"
        )
    return (
        f"watchdog: the step used {violation['used_bytes']} bytes of GPU memory, over its limit "
        f"of {violation['limit_bytes']}; it was stopped"
    )


# --- the whole step ---------------------------------------------------------------------------------


def _base_record(run: StepRun, config: LauncherConfig | None) -> AuditRecord:
    record: AuditRecord = {
        "schema": AUDIT_SCHEMA,
        "run_id": run.run_id,
        "host": os.uname().nodename,
        "command": run.command[:1],
    }
    if config is not None:
        record.update(
            {
                "tenant": config.tenant,
                "namespace": config.namespace,
                "pipeline": config.pipeline,
                "step": config.step,
                "image": config.image,
                "image_digest": config.image_digest,
                "isolation": config.isolation,
                "expected_spiffe_id": config.expected_spiffe_id,
                "gpu_request": config.gpu_request.to_dict() if config.gpu_request else None,
                "limits": (
                    {
                        "memory": config.gpu_request.memory,
                        "compute": config.gpu_request.compute,
                        "source": contract.ENV_GPU_REQUEST,
                    }
                    if isinstance(config.gpu_request, TimeSlice)
                    else None
                ),
                "controls": {
                    "identity_required": config.identity_required,
                    "scrub_before": config.scrub_before,
                    "scrub_after": config.scrub_after,
                    "scrub_verify": config.scrub_verify,
                    "shim": config.shim_mode,
                    "confidential_computing": config.confidential_computing,
                },
            }
        )
    return record


def execute(command: list[str]) -> int:
    """Run every stage for `command`; return the launcher's exit code."""
    run = StepRun(command)
    run.install_signal_handlers()
    config: LauncherConfig | None = None

    def read_config() -> dict[str, Any]:
        nonlocal config
        config = load_config()
        return {"isolation": config.isolation, "uses_gpu": config.uses_gpu}

    run.stage("config", ExitCode.CONFIG, True, read_config)
    if config is not None:
        _stages(run, config)
    return _finish(run, config)


def _stages(run: StepRun, config: LauncherConfig) -> None:
    gpu_reason = "no GPU for this step (isolation none)"
    from . import shim_control as shim

    pre_run: list[tuple[str, Callable[[], None] | None, str]] = [
        (
            "shim-claim",
            (lambda: claim_stage(run, config)) if shim.interposed() is not None else None,
            "the shim is not preloaded into the launcher",
        ),
        ("identity", lambda: identity_stage(run, config), ""),
        (
            "verify-inputs",
            (lambda: verify_inputs_stage(run, config)) if config.verify_inputs else None,
            "the step verifies no input",
        ),
        (
            "preflight",
            (lambda: preflight_stage(run, config)) if config.uses_gpu else None,
            gpu_reason,
        ),
        (
            "scrub-before",
            (lambda: scrub_stage(run, config, "scrub-before", ExitCode.SCRUB_BEFORE))
            if config.uses_gpu and config.scrub_before
            else None,
            gpu_reason if not config.uses_gpu else "not required by the profile",
        ),
        (
            "shim",
            (lambda: shim_stage(run, config)) if config.uses_gpu and config.shim_required else None,
            gpu_reason
            if not config.uses_gpu
            else (
                "off in the profile"
                if isinstance(config.gpu_request, TimeSlice)
                else "not a shared GPU"
            ),
        ),
    ]
    for name, action, reason in pre_run:
        if run.failed:
            run.skip(name, "an earlier stage failed" if run.exit_code else "launcher was signalled")
        elif action is None:
            run.skip(name, reason)
        else:
            action()
    if run.failed:
        run.skip("run", "an earlier stage failed" if run.exit_code else "launcher was signalled")
        return
    run_child(run, config)
    collect_shim_counters(run)
    if not config.uses_gpu:
        run.skip("scrub-after", gpu_reason)
    elif not config.scrub_after:
        run.skip("scrub-after", "not required by the profile")
    else:
        scrub_stage(run, config, "scrub-after", ExitCode.SCRUB_AFTER)
        from .xid_events import mark_scrub_unverified

        mark_scrub_unverified(run.stages, run.record)


def _finish(run: StepRun, config: LauncherConfig | None) -> int:
    """Decide the exit code, write the audit record; an audit failure is the last that can fail."""
    if run.exit_code is not None:
        exit_code = run.exit_code
    elif run.child_exit_code is not None:
        exit_code = run.child_exit_code
    else:  # the launcher was signalled before the command started
        assert run.pending_signal is not None
        exit_code = 128 + run.pending_signal
    record = _base_record(run, config) | run.record
    record.update(
        {
            "stages": run.stages,
            "child_exit_code": run.child_exit_code,
            "exit_code": exit_code,
            "started_at": run.started_at,
            "ended_at": _now(),
            "seconds": round(time.perf_counter() - run.started, 6),
        }
    )
    record.setdefault("violations", [])
    audit_dir = config.audit_dir if config is not None else _audit_dir_fallback()
    if audit_dir is None:
        record["audit_file"] = None
    else:
        record["audit_file"] = str(audit_dir / audit_file_name(record))
        try:
            write_audit_record(record, audit_dir)
        except AuditError as err:
            _log(f"stage audit failed:\n{err.diagnostics()}")
            record["audit_file"] = None
            record["audit_error"] = err.diagnostics()
            if run.exit_code is None:
                record["exit_code"] = exit_code = int(ExitCode.AUDIT)
    emit_audit_line(record, sys.stderr)
    return exit_code


def _audit_dir_fallback() -> Path | None:
    """The audit folder when the configuration itself failed to load (still worth a record)."""
    raw = os.environ.get(contract.ENV_AUDIT_DIR)
    return Path(raw) if raw else None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        _log(f"usage: python3 -m {contract.LAUNCHER_MODULE} -- <command> [args...]")
        return int(ExitCode.USAGE)
    return execute(args)


if __name__ == "__main__":
    sys.exit(main())
