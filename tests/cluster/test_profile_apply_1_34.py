"""`secureml profile apply` on a real kube-apiserver 1.34, MutatingAdmissionPolicy beta enabled
(the harness's `--feature-gates=MutatingAdmissionPolicy=true` and
`--runtime-config=admissionregistration.k8s.io/v1beta1=true`): the 1.34 bundle applies; the 1.36
bundle (GA v1 MAP) is refused before anything is written, naming the version to render."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secureml.cli import app
from tests.harness.controlplane import ControlPlane
from tests.support.cluster_bundles import admin, fresh_profile
from tests.support.control_planes import control_plane


@pytest.fixture(scope="module")
def k8s_1_34() -> Iterator[ControlPlane]:
    yield from control_plane("1.34")


def _apply(cluster: ControlPlane, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["profile", "apply", *args, "--kubeconfig", str(cluster.kubeconfig)]
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_beta_map_bundle_applies_and_ga_bundle_is_refused(
    k8s_1_34: ControlPlane, tmp_path: Path
) -> None:
    connection = admin(k8s_1_34)
    assert connection.version().startswith("v1.34.")
    profile, namespace = fresh_profile(tmp_path)
    code, output = _apply(k8s_1_34, str(profile), "--k8s-version", "1.36")
    assert code == 2, output
    assert "MutatingAdmissionPolicy is not served at admissionregistration.k8s.io/v1" in output
    assert "serves only the beta API" in output and "--k8s-version 1.34" in output
    assert not connection.exists(f"/api/v1/namespaces/{namespace}")

    code, output = _apply(
        k8s_1_34, str(profile), "--k8s-version", "1.34", "--type-check-wait", "60"
    )
    assert code == 0, output
    assert f"MutatingAdmissionPolicy/secureml-{namespace}-mutate-steps" in output
    assert "warning:" not in output
