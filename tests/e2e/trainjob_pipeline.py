"""The trainer pipeline of tests/e2e/test_trainjob_run.py: one trainer step of two nodes whose
function is a plain-Python workload (torch is not in the step image, and neither is
`secureml.trainer.standin`: the runtime carries only what the launcher imports): a rendezvous over
the pod network with the environment Trainer's torch plugin sets, one all-reduce, then the NetworkPolicy
probes that test describes.

No `from __future__ import annotations` here: kfp reads the component's parameter types when the
component is made.
"""

from typing import Any

NODES = 2
HOLD_S = 30  # how long node 0 listens after the all-reduce, for the probes
STEP = "rendezvous"


def rendezvous_pipeline(image: str) -> Any:
    """One trainer step of `NODES` nodes; its function is the plain-Python workload."""
    from kfp import dsl

    from secureml import secure_component

    @secure_component(image=image, nodes=NODES, trainer_runtime="torch-distributed")
    def rendezvous(bystander: str, hold: int) -> None:
        import os
        import socket
        import time

        rank, world = int(os.environ["PET_NODE_RANK"]), int(os.environ["PET_NNODES"])
        master, port = os.environ["PET_MASTER_ADDR"], int(os.environ["PET_MASTER_PORT"])

        def connect(deadline: float) -> socket.socket:
            while True:
                try:
                    return socket.create_connection((master, port), timeout=5)
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

        # the rendezvous, c10d's shape: node 0 serves at PET_MASTER_ADDR:PET_MASTER_PORT, every
        # other node connects; one all-reduce (a sum) over those connections
        if rank == 0:
            with socket.create_server((master, port)) as server:
                server.settimeout(60)
                peers = [server.accept()[0] for _ in range(world - 1)]
                total = 1 + sum(int(peer.makefile().readline()) for peer in peers)
                for peer in peers:
                    with peer:
                        peer.sendall(f"{total}\n".encode())
        else:
            with connect(time.monotonic() + 60) as conn:
                conn.sendall(f"{rank + 1}\n".encode())
                total = int(conn.makefile().readline())
        address = socket.gethostbyname(master)
        print(f"rendezvous: node {rank} of {world}, {master} is {address}, sum {total}", flush=True)
        if total != world * (world + 1) // 2:
            raise SystemExit(f"all-reduce gave {total}")
        if rank == 0:
            with socket.create_server(("", port)) as server:
                server.settimeout(0.5)
                print(f"holding {port} for {hold} s", flush=True)
                end = time.monotonic() + hold
                while time.monotonic() < end:
                    try:
                        peer = server.accept()
                    except TimeoutError:
                        continue
                    print(f"accepted {peer[1][0]}", flush=True)
                    with peer[0]:
                        peer[0].sendall(b"hold\n")
        else:  # until node 0's second listener answers (the first may still take connections)
            deadline = time.monotonic() + 20
            while True:
                try:
                    with connect(deadline) as conn:
                        if conn.makefile().readline() == "hold\n":
                            break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.2)
            print(f"reconnected to node 0 at {address}:{port}", flush=True)
        host, _, bystander_port = bystander.rpartition(":")
        try:
            socket.create_connection((host, int(bystander_port)), timeout=3).close()
            print(f"egress to {bystander}: open", flush=True)
        except OSError as error:
            print(f"egress to {bystander}: closed ({error})", flush=True)

    @dsl.pipeline(name="trainjob-e2e")
    def pipeline(bystander: str = "", hold: int = HOLD_S) -> None:
        rendezvous(bystander=bystander, hold=hold)

    return pipeline
