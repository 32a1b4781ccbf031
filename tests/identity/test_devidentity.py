"""The dev Workload API itself: SPIRE's header rule, attestation by peer process, the API surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from spiffe import WorkloadApiClient
from spiffe._proto import workload_pb2, workload_pb2_grpc

from secureml.core import contract
from secureml.localrun.dev_identity import DevWorkloadAPI, Workload

SPIFFE_ID = "spiffe://acme.example/ns/team-a/pipeline/p/step/s"


def _stub(api: DevWorkloadAPI) -> tuple[grpc.Channel, workload_pb2_grpc.SpiffeWorkloadAPIStub]:
    channel = grpc.insecure_channel(f"unix:{api.socket_path}")
    return channel, workload_pb2_grpc.SpiffeWorkloadAPIStub(channel)


def test_calls_without_the_security_header_are_refused(tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "a.sock", spiffe_id=SPIFFE_ID) as api:
        channel, stub = _stub(api)
        with channel:
            with pytest.raises(grpc.RpcError) as caught:
                next(stub.FetchX509SVID(workload_pb2.X509SVIDRequest(), timeout=5))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "security header" in caught.value.details()
            answer = next(
                stub.FetchX509SVID(
                    workload_pb2.X509SVIDRequest(),
                    timeout=5,
                    metadata=[("workload.spiffe.io", "true")],
                )
            )
    assert [svid.spiffe_id for svid in answer.svids] == [SPIFFE_ID]


def test_bundles_are_served_and_jwt_is_unimplemented(tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "a.sock", spiffe_id=SPIFFE_ID) as api:
        with WorkloadApiClient(api.endpoint, default_timeout=5) as client:
            bundles = client.fetch_x509_bundles()
        (bundle,) = bundles.bundles
        assert str(bundle.trust_domain) == "acme.example"
        channel, stub = _stub(api)
        with channel:
            with pytest.raises(grpc.RpcError) as caught:
                stub.FetchJWTSVID(
                    workload_pb2.JWTSVIDRequest(audience=["x"]),
                    timeout=5,
                    metadata=[("workload.spiffe.io", "true")],
                )
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_identity_is_decided_by_attesting_the_calling_process(tmp_path: Path) -> None:
    """Two processes with different step variables get different SVIDs from one socket."""

    def by_step(workload: Workload) -> str | None:
        step = workload.env.get(contract.ENV_STEP)
        return f"spiffe://acme.example/step/{step}" if step else None

    probe = (
        "import json, sys\n"
        "from spiffe import WorkloadApiClient\n"
        "with WorkloadApiClient(sys.argv[1], default_timeout=10) as c:\n"
        "    print(json.dumps(str(c.fetch_x509_svid().spiffe_id)))\n"
    )
    with DevWorkloadAPI(tmp_path / "a.sock", spiffe_id=by_step, trust_domain="acme.example") as api:
        got = {}
        for step in ("prep", "train"):
            env = {**os.environ, contract.ENV_STEP: step}
            proc = subprocess.run(
                [sys.executable, "-c", probe, api.endpoint],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            got[step] = json.loads(proc.stdout)
        pids = {workload.pid for workload in api.workloads}
    assert got == {
        "prep": "spiffe://acme.example/step/prep",
        "train": "spiffe://acme.example/step/train",
    }
    assert os.getpid() not in pids and len(pids) == 2


def test_socket_is_removed_on_exit_and_bad_arguments_are_refused(tmp_path: Path) -> None:
    with DevWorkloadAPI(tmp_path / "a.sock", spiffe_id=SPIFFE_ID) as api:
        assert (tmp_path / "a.sock").is_socket()
        assert api.endpoint == f"unix://{tmp_path / 'a.sock'}"
    assert not (tmp_path / "a.sock").exists()
    with pytest.raises(ValueError):
        DevWorkloadAPI(tmp_path / "b.sock", spiffe_id="https://not-spiffe")


def test_a_registration_that_raises_hangs_up_instead_of_hanging(tmp_path: Path) -> None:
    import time

    from secureml.enforcement.identity import IdentityError, fetch_and_check_identity

    def broken(workload: Workload) -> str:
        raise KeyError("no such step")

    with DevWorkloadAPI(tmp_path / "a.sock", spiffe_id=broken, trust_domain="acme.example") as api:
        started = time.monotonic()
        with pytest.raises(IdentityError, match="failed"):
            fetch_and_check_identity(SPIFFE_ID, api.endpoint, tmp_path / "out", 5.0)
    assert time.monotonic() - started < 3.0
