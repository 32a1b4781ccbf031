"""STAND-IN for torch.distributed's rendezvous (no torch here), for local runs and tests."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

DEFAULT_TIMEOUT_S = 30.0


def _world(env: Mapping[str, str]) -> tuple[int, int, str, int]:
    return (
        int(env["PET_NODE_RANK"]),
        int(env["PET_NNODES"]),
        env["PET_MASTER_ADDR"],
        int(env["PET_MASTER_PORT"]),
    )


def _read_int(conn: socket.socket) -> int:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise ConnectionError("peer closed the rendezvous connection")
        data += chunk
    return int(data)


def all_reduce_sum(
    value: int, env: Mapping[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> int:
    """The sum of `value` over every node of the job; blocks until all nodes have joined."""
    rank, world, address, port = _world(os.environ if env is None else env)
    if world == 1:
        return value
    if rank == 0:
        with socket.create_server((address, port)) as server:
            server.settimeout(timeout_s)
            peers = [server.accept()[0] for _ in range(world - 1)]
            total = value + sum(_read_int(peer) for peer in peers)
            for peer in peers:
                with peer:
                    peer.sendall(f"{total}\n".encode())
            return total
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=timeout_s)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.sendall(f"{value}\n".encode())
        return _read_int(conn)
