"""Mounts a task adds through kfp.kubernetes: refused at compile time where admission would refuse
them (secureml.mountPaths on the preview), and every mount of `main` is in the report."""

import pytest
from kfp import dsl, kubernetes

from secureml import secure_component
from secureml.compile.compiler import CompileError, compile_pipeline
from tests.support.compiled import IMAGE
from tests.support.profiles import make_profile


@secure_component(image=IMAGE)
def step(x: int) -> int:
    return x


def _pipeline(configure):
    @dsl.pipeline(name="mounts")
    def pipeline() -> None:
        configure(step(x=1))

    return pipeline


def _refused(configure) -> set[str]:
    with pytest.raises(CompileError) as err:
        compile_pipeline(_pipeline(configure), make_profile())
    return {v.rule for v in err.value.violations}


@pytest.mark.parametrize(
    "configure",
    [
        lambda t: kubernetes.empty_dir_mount(t, volume_name="shim", mount_path="/usr/local/lib"),
        lambda t: kubernetes.empty_dir_mount(t, volume_name="etc", mount_path="/etc"),
        lambda t: kubernetes.mount_pvc(t, pvc_name="tools", mount_path="/opt/venv"),
        lambda t: kubernetes.use_config_map_as_volume(
            t, config_map_name="cfg", mount_path="/etc/secureml/podinfo/limits"
        ),
        lambda t: kubernetes.use_secret_as_volume(t, secret_name="s", mount_path="/kfp-launcher"),
    ],
    ids=["emptydir-usr-local-lib", "emptydir-etc", "pvc-opt", "configmap-podinfo", "secret-kfp"],
)
def test_mount_outside_the_allowed_paths_is_refused(configure) -> None:
    assert "secureml.mountPaths" in _refused(configure)


def test_data_mount_is_allowed_and_every_mount_is_reported() -> None:
    def configure(task) -> None:
        kubernetes.mount_pvc(task, pvc_name="datasets", mount_path="/data/train")

    (report,) = compile_pipeline(_pipeline(configure), make_profile()).steps
    assert "/data/train <- persistentVolumeClaim pvc-0" in report.mounts
    assert "/kfp-launcher <- emptyDir kfp-launcher" in report.mounts
    assert any(m.startswith("/tmp <- emptyDir ") for m in report.mounts)
    assert report.to_dict()["mounts"] == report.mounts
