"""A real SPIRE for tests: spire-server and spire-agent v1.13 on loopback, one trust domain.

The binaries come from tests/harness/build.sh (built from github.com/spiffe/spire through the Go
module proxy). The server listens on 127.0.0.1 with a sqlite datastore and an in-memory CA key in a
fresh temporary folder; the agent attests with a one-time join token and checks the server against
the trust bundle the server itself prints (`bundle show`), so no `insecure_bootstrap` is needed. The
agent keeps its own key on disk, so `stop_agent()` then `start_agent()` brings the same agent (same
SPIFFE ID, same entries) back without a second token. Workloads are attested by the unix attestor
(uid, gid, and so on, of the process on the other end of the Workload API socket).

Intervals are shortened so that a new entry reaches the agent within about a second: the server's
entry cache reloads every 500 ms and the agent syncs every 500 ms (both are SPIRE's documented
`experimental` knobs; the defaults are 5 s).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .built import HarnessError, built

HARNESS = Path(__file__).resolve().parent
TRUST_DOMAIN = "acme.example"
READY_TIMEOUT_S = 60.0


def server_config(
    port: int, socket_path: Path, trust_domain: str, data: Path, attestor: str, attestor_data: str
) -> str:
    """A spire-server's configuration: in-memory keys, SQLite, one node attestor (`attestor`,
    with `attestor_data` inside its `plugin_data`)."""
    return f"""
server {{
    bind_address = "127.0.0.1"
    bind_port = "{port}"
    socket_path = "{socket_path}"
    trust_domain = "{trust_domain}"
    data_dir = "{data}"
    log_level = "INFO"
    ca_ttl = "24h"
    default_x509_svid_ttl = "1h"
    experimental {{
        cache_reload_interval = "500ms"
    }}
}}
plugins {{
    DataStore "sql" {{
        plugin_data {{
            database_type = "sqlite3"
            connection_string = "{data}/datastore.sqlite3"
        }}
    }}
    KeyManager "memory" {{
        plugin_data {{}}
    }}
    NodeAttestor "{attestor}" {{
        plugin_data {{{attestor_data}}}
    }}
}}
"""


class SpireError(RuntimeError):
    """SPIRE could not be built, started or driven; the message carries the process's output."""


def build_spire() -> Path:
    """The folder holding spire-server and spire-agent (built once per machine by build.sh)."""
    try:
        return built("spire", ("spire-server", "spire-agent"))
    except HarnessError as error:
        raise SpireError(str(error)) from error


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Entry:
    """A registration entry as the server stored it."""

    id: str
    spiffe_id: str
    selectors: tuple[str, ...]


class Spire:
    """One spire-server and one spire-agent under `root` (short: unix socket paths are limited)."""

    def __init__(self, bin_dir: Path, root: Path, trust_domain: str = TRUST_DOMAIN) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.trust_domain = trust_domain
        self.server_socket = root / "server" / "api.sock"
        self.agent_socket = root / "workload" / "api.sock"
        self.bundle_path = root / "agent" / "bootstrap.pem"
        self.agent_id = ""
        self._server: subprocess.Popen[bytes] | None = None
        self._agent: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def endpoint(self) -> str:
        """The Workload API endpoint, as `SPIFFE_ENDPOINT_SOCKET` spells it."""
        return f"unix://{self.agent_socket}"

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Spire:
        self._port = _free_port()
        self._server = self._spawn("spire-server", "server", self._server_config())
        self._wait_healthy("spire-server", self._server, "-socketPath", self.server_socket)
        out = self.server(["token", "generate"], "-ttl", "600")
        (token,) = [line.split()[1] for line in out.splitlines() if line.startswith("Token: ")]
        self.agent_id = f"spiffe://{self.trust_domain}/spire/agent/join_token/{token}"
        self.bundle_path.parent.mkdir(parents=True, exist_ok=True)
        self.bundle_path.write_text(self.server(["bundle", "show"]))
        self._start_agent(["-joinToken", token])
        return self

    def stop_agent(self, *, crash: bool = False) -> None:
        """Stop the agent: SIGTERM (it shuts down and removes the Workload API socket), or with
        `crash` SIGKILL (the socket file stays behind, nobody listens on it)."""
        if crash and self._agent is not None:
            self._agent.kill()
            self._agent.wait(timeout=10)
        _terminate(self._agent)
        self._agent = None

    def start_agent(self) -> None:
        """Start the stopped agent again: it resumes with its stored SVID and key, no new token."""
        if self._agent is None:
            self._start_agent([])

    @contextmanager
    def agent_stopped(self, *, crash: bool = False) -> Iterator[None]:
        """The agent is down inside the block and back (healthy) after it."""
        self.stop_agent(crash=crash)
        try:
            yield
        finally:
            self.start_agent()

    def close(self) -> None:
        _terminate(self._agent)
        _terminate(self._server)
        self._agent = self._server = None

    # -- registration ----------------------------------------------------------------------------

    def server(self, command: Sequence[str], *args: str) -> str:
        """Run one `spire-server` CLI command (`["entry", "show"]`) against this server; its stdout."""
        proc = subprocess.run(
            [
                *(str(self.bin_dir / "spire-server"), *command),
                *("-socketPath", str(self.server_socket), *args),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode != 0:
            raise SpireError(
                f"spire-server {' '.join([*command, *args])} failed:\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    def create_entry(self, spiffe_id: str, selectors: Sequence[str]) -> Entry:
        """Register `spiffe_id` for workloads of this agent matching all `selectors` (`unix:uid:N`)."""
        args = ["-parentID", self.agent_id, "-spiffeID", spiffe_id]
        for selector in selectors:
            args += ["-selector", selector]
        out = json.loads(self.server(["entry", "create"], *args, "-output", "json"))
        (result,) = out["results"]
        if result["status"]["code"] != 0:
            raise SpireError(f"entry create {spiffe_id} refused: {result['status']['message']}")
        return Entry(result["entry"]["id"], spiffe_id, tuple(selectors))

    def delete_entry(self, entry: Entry) -> None:
        self.server(["entry", "delete"], "-entryID", entry.id)

    def list_entries(self) -> list[dict[str, object]]:
        out = json.loads(self.server(["entry", "show"], "-output", "json"))
        return list(out.get("entries") or [])

    def wait_for_svid(
        self, spiffe_id: str | None, uid: int, gid: int, timeout_s: float = 15.0
    ) -> float:
        """Poll the Workload API as `uid`:`gid` until the agent serves `spiffe_id` (None: no SVID
        at all); the seconds it took. Entries reach the agent asynchronously, so a test waits here
        before it runs the launcher, instead of sleeping."""
        started = time.monotonic()
        seen = ""
        while time.monotonic() - started < timeout_s:
            proc = subprocess.run(
                [
                    str(self.bin_dir / "spire-agent"),
                    *("api", "fetch", "x509", "-output", "json", "-timeout", "2s"),
                    *("-socketPath", str(self.agent_socket)),
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                user=uid,
                group=gid,
                extra_groups=[],
            )
            seen = proc.stdout + proc.stderr
            ids = _svid_ids(proc.stdout) if proc.returncode == 0 else []
            if (spiffe_id is None and not ids) or (spiffe_id is not None and ids == [spiffe_id]):
                return time.monotonic() - started
            time.sleep(0.1)
        raise SpireError(
            f"the agent did not serve {spiffe_id} to uid {uid} in {timeout_s} s:\n{seen}"
        )

    # -- internals -------------------------------------------------------------------------------

    def _server_config(self) -> str:
        return server_config(
            self._port,
            self.server_socket,
            self.trust_domain,
            self.root / "server",
            "join_token",
            "",
        )

    def _agent_config(self) -> str:
        data = self.root / "agent"
        return f"""
agent {{
    data_dir = "{data}"
    log_level = "INFO"
    server_address = "127.0.0.1"
    server_port = "{self._port}"
    socket_path = "{self.agent_socket}"
    trust_bundle_path = "{self.bundle_path}"
    trust_domain = "{self.trust_domain}"
    experimental {{
        sync_interval = "500ms"
    }}
}}
plugins {{
    KeyManager "disk" {{
        plugin_data {{
            directory = "{data}"
        }}
    }}
    NodeAttestor "join_token" {{
        plugin_data {{}}
    }}
    WorkloadAttestor "unix" {{
        plugin_data {{}}
    }}
}}
"""

    def _start_agent(self, extra: list[str]) -> None:
        self.agent_socket.parent.mkdir(exist_ok=True)
        self._agent = self._spawn("spire-agent", "agent", self._agent_config(), extra)
        self._wait_healthy("spire-agent", self._agent, "-socketPath", self.agent_socket)

    def _spawn(
        self, binary: str, name: str, config: str, extra: Sequence[str] = ()
    ) -> subprocess.Popen[bytes]:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.conf").write_text(config)
        with (folder / f"{name}.log").open("ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen(
                [
                    str(self.bin_dir / binary),
                    "run",
                    "-config",
                    str(folder / f"{name}.conf"),
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _wait_healthy(
        self, binary: str, proc: subprocess.Popen[bytes], *socket_args: object
    ) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SpireError(f"{binary} exited with {proc.returncode}:\n{self._log(binary)}")
            check = subprocess.run(
                [str(self.bin_dir / binary), "healthcheck", *map(str, socket_args)],
                capture_output=True,
                timeout=30,
                check=False,
            )
            if check.returncode == 0:
                return
            time.sleep(0.05)
        raise SpireError(f"{binary} not healthy in {READY_TIMEOUT_S} s:\n{self._log(binary)}")

    def _log(self, binary: str) -> str:
        name = "server" if binary == "spire-server" else "agent"
        path = self.root / name / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


def _svid_ids(output: str) -> list[str]:
    """The SPIFFE IDs in `spire-agent api fetch x509 -output json`."""
    try:
        answer = json.loads(output)
    except json.JSONDecodeError:
        return []
    return [svid["spiffe_id"] for svid in answer.get("svids") or []]


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so a crashed pytest worker leaks no SPIRE."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def running_spire(bin_dir: Path | None = None, trust_domain: str = TRUST_DOMAIN) -> Iterator[Spire]:
    """Start SPIRE (built once if `bin_dir` is not given) in a fresh private folder under /tmp
    (short: unix socket paths are limited to 108 bytes); stop and remove it afterwards."""
    root = Path(tempfile.mkdtemp(prefix="spire-", dir="/tmp"))
    spire = Spire(bin_dir or build_spire(), root, trust_domain)
    try:
        yield spire.start()
    finally:
        spire.close()
        shutil.rmtree(root, ignore_errors=True)
