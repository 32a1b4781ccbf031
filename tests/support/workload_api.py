"""Workload API doubles that misbehave, built on `secureml.localrun.dev_identity.DevWorkloadAPI`.

The package's dev Workload API only serves (as `secureml run --dev-identity` needs); the failure
modes the identity stage must survive live here, in the tests.
"""

from __future__ import annotations

import datetime as dt
import socket

import grpc

from secureml.localrun.dev_identity import SVID_TTL, DevWorkloadAPI, IssuedSvid


class HangingWorkloadAPI(DevWorkloadAPI):
    """Accepts each call and never sends anything (until it is stopped)."""

    def _before_answer(self, context: grpc.ServicerContext) -> None:
        self._stopping.wait()
        context.abort(grpc.StatusCode.UNAVAILABLE, "dev Workload API stopped")


class MuteWorkloadAPI(DevWorkloadAPI):
    """Accepts each connection and never speaks gRPC at all (the connection is held open)."""

    def _on_connection(self, conn: socket.socket) -> None:
        pass


class ExpiredSvidWorkloadAPI(DevWorkloadAPI):
    """Serves SVIDs whose validity ended an hour ago."""

    def _issue(self, spiffe_id: str) -> IssuedSvid:
        return self.ca.issue(spiffe_id, not_after=dt.datetime.now(dt.UTC) - SVID_TTL)


SILENT = {"hang": HangingWorkloadAPI, "mute": MuteWorkloadAPI}
