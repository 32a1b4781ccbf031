"""`secureml doctor node` on the fake NVML and a host tree of our own making.

Each run is the CLI in its own process (NVML is the fake `libnvidia-ml.so.1` there, as the real
one would be on a node); the host's files (`/proc/driver/nvidia/version`, `/sys/module/nvidia`,
the toolkit's `config.toml`) live under `--root`. The device plugin's configurations are NVIDIA's
own examples (../shared/fixtures/nvidia/k8s-device-plugin/extracted-from-README).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.doctor_host import DRIVER, H100, by_name, host_root
from tests.support.fakegpu import FakeConfidential, FakeDevice, FakeGPU, FakeMig, MiB
from tests.support.json_schemas import check
from tests.support.paths import fixture_dir

REPO = Path(__file__).resolve().parents[2]


def cc_profile(tmp_path: Path, base: str = "team-restricted") -> Path:
    """An example profile with gpu.confidentialComputing: required."""
    text = (REPO / "profiles" / f"{base}.yaml").read_text()
    if "confidentialComputing" not in text:
        text = text.replace(
            "    backend: device-plugin\n",
            "    backend: device-plugin\n    confidentialComputing: required\n",
            1,
        )
    path = tmp_path / f"{base}-cc.yaml"
    path.write_text(text)
    return path


def doctor(gpu: FakeGPU, root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "secureml",
            "doctor",
            "node",
            "--root",
            str(root),
            "--format",
            "json",
            *args,
        ],
        env=gpu.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    check("doctor-node", document)
    return result.returncode, document


def test_a_healthy_confidential_node_passes(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100), FakeDevice(name=H100)],
        driver_version=DRIVER,
        confidential=FakeConfidential(mode="on", ready=True, capable=True, cpu=3),
    )
    code, report = doctor(
        gpu,
        host_root(tmp_path),
        "--profiles",
        str(cc_profile(tmp_path)),
        "--node-labels",
        "secureml.dev/pool=restricted-h100,nvidia.com/cc.ready.state=true",
    )
    assert code == 0, report
    assert report["schema"] == "secureml.dev/doctor-node/v1" and report["status"] == "pass"
    checks = by_name(report)
    assert checks["profiles.pool"]["seen"].startswith("team-restricted by the node's labels")
    assert "CUDA 12.4" in checks["driver.version"]["seen"]
    assert "CC mode on, GPUs ready" in checks["cc.state"]["seen"]
    assert "amd-sev-snp" in checks["cc.state"]["seen"]
    assert {f"gpu[{i}].{c}" for i in (0, 1) for c in ("persistence", "ecc", "mig")} <= set(checks)
    assert all(c["fix"] == "" for c in report["checks"])


def test_each_fault_is_named_with_its_fix(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(
        devices=[
            FakeDevice(
                name=H100,
                persistence_mode=False,
                ecc_uncorrected=2,
                ecc_corrected=5,
                retired_pages_pending=True,
                remapped_rows_failure=True,
                remapped_rows_unc=1,
            )
        ],
        driver_version="560.35.03",
    )
    code, report = doctor(
        gpu, host_root(tmp_path, envvar=None), "--profiles", str(cc_profile(tmp_path))
    )
    assert code == 1
    checks = by_name(report)
    status = {name: c["status"] for name, c in checks.items()}
    assert status["driver.version"] == "fail"
    assert "Driver/library version mismatch" in checks["driver.version"]["seen"]
    assert status["gpu[0].persistence"] == "warn"
    assert status["gpu[0].ecc"] == "fail" and "2 uncorrected" in checks["gpu[0].ecc"]["seen"]
    assert status["gpu[0].retired_pages"] == "fail"
    assert (
        status["gpu[0].row_remapping"] == "fail"
        and checks["gpu[0].row_remapping"]["fix"] == "replace the GPU"
    )
    assert status["toolkit.envvar"] == "fail"
    assert "not set" in checks["toolkit.envvar"]["seen"]
    assert (
        status["cc.state"] == "fail" and "required by team-restricted" in checks["cc.state"]["seen"]
    )
    assert all(c["fix"] for c in report["checks"] if c["status"] != "pass")


def test_toolkit_envvar_true_fails_and_a_missing_module_too(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(driver_version=DRIVER)
    code, report = doctor(gpu, host_root(tmp_path, module=None, envvar="true"))
    checks = by_name(report)
    assert code == 1
    assert checks["kernel.module"]["status"] == "fail"
    assert checks["toolkit.envvar"]["status"] == "fail"
    assert "= true" in checks["toolkit.envvar"]["seen"]
    assert checks["profiles.pool"]["status"] == "warn"


def test_mig_layout_against_the_profiles_of_the_pool(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(
        devices=[
            FakeDevice(
                name=H100,
                mig_mode=True,
                migs=[FakeMig("3g.40gb", 64 * MiB), FakeMig("4g.40gb", 64 * MiB)],
            ),
            FakeDevice(name=H100, mig_mode=True),
        ],
        driver_version=DRIVER,
    )
    labels = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
    code, report = doctor(
        gpu,
        host_root(tmp_path),
        "--profiles",
        str(REPO / "profiles/team-conf.yaml"),
        "--node-labels",
        labels,
    )
    checks = by_name(report)
    assert code == 1
    assert checks["gpu[0].mig"]["status"] == "pass"
    assert checks["gpu[1].mig"]["status"] == "fail"  # MIG on, no instance: nothing usable
    profiles = checks["mig.profiles"]
    assert profiles["status"] == "warn"
    assert "4g.40gb allowed by no profile" in profiles["seen"]
    assert "no instance of 1g.10gb" in profiles["seen"]


def test_a_node_outside_every_pool_is_said_so(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(devices=[FakeDevice(name="NVIDIA A30")], driver_version=DRIVER)
    code, report = doctor(
        gpu,
        host_root(tmp_path),
        "--profiles",
        str(REPO / "profiles"),
        "--node-labels",
        "nvidia.com/gpu.product=NVIDIA-A30",
    )
    checks = by_name(report)
    assert checks["profiles.pool"]["status"] == "warn"
    assert "selects this node" in checks["profiles.pool"]["seen"]
    assert "mig.profiles" not in checks


def test_cc_label_that_nvml_does_not_confirm(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(
        devices=[FakeDevice(name=H100)],
        driver_version=DRIVER,
        confidential=FakeConfidential(mode="devtools", ready=True, capable=True),
    )
    code, report = doctor(
        gpu, host_root(tmp_path), "--node-labels", "nvidia.com/cc.ready.state=true"
    )
    cc = by_name(report)["cc.state"]
    assert code == 1 and cc["status"] == "fail"
    assert "labelled nvidia.com/cc.ready.state=true" in cc["seen"]


def test_nvml_that_does_not_start_is_one_failed_check(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(fail_nvmlinit=9)
    code, report = doctor(gpu, host_root(tmp_path))
    checks = by_name(report)
    assert code == 1
    assert checks["nvml.reachable"]["status"] == "fail"
    assert "Driver Not Loaded" in checks["nvml.reachable"]["seen"]
    assert "driver.version" not in checks


def _device_plugin(name: str) -> Path:
    return fixture_dir("nvidia", "k8s-device-plugin", "extracted-from-README") / name


def test_time_slicing_of_nvidias_examples_against_team_a(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(driver_version=DRIVER)
    root = host_root(tmp_path)
    labels = ("--node-labels", "nvidia.com/gpu.sharing-strategy=time-slicing")
    team_a = ("--profiles", str(REPO / "profiles/team-a.yaml"))
    code, report = doctor(
        gpu,
        root,
        *team_a,
        *labels,
        "--device-plugin-config",
        str(_device_plugin("timeslicing-renameByDefault-replicas10.yaml")),
    )
    shared = by_name(report)["device_plugin.timeslice[nvidia.com/gpu.shared]"]
    assert shared["status"] == "warn", shared  # renamed x10, but failRequestsGreaterThanOne unset
    assert "x10 replicas" in shared["seen"] and "failRequestsGreaterThanOne" in shared["fix"]
    code, report = doctor(
        gpu,
        root,
        *team_a,
        *labels,
        "--device-plugin-config",
        str(_device_plugin("timeslicing-nvidia-gpu-replicas10.yaml")),
    )
    shared = by_name(report)["device_plugin.timeslice[nvidia.com/gpu.shared]"]
    assert code == 1 and shared["status"] == "fail"
    assert "time-slices nvidia.com/gpu x10" in shared["seen"]
    assert "renameByDefault: true" in shared["fix"]
    code, report = doctor(gpu, root, *team_a, *labels)
    assert by_name(report)["device_plugin.config"]["status"] == "warn"


def test_mig_strategy_of_the_device_plugin(make_fake_gpu, tmp_path: Path) -> None:
    gpu = make_fake_gpu(driver_version=DRIVER)
    root = host_root(tmp_path)
    conf = ("--profiles", str(REPO / "profiles/team-conf.yaml"))
    _, report = doctor(
        gpu, root, *conf, "--device-plugin-config", str(_device_plugin("dp-example-config1.yaml"))
    )
    assert by_name(report)["device_plugin.mig_strategy"]["status"] == "pass"
    _, report = doctor(
        gpu, root, *conf, "--device-plugin-config", str(_device_plugin("dp-example-config0.yaml"))
    )
    strategy = by_name(report)["device_plugin.mig_strategy"]
    assert strategy["status"] == "fail" and "migStrategy none" in strategy["seen"]


def test_a_gpu_operator_configmap_entry_chosen_by_the_node_label(
    make_fake_gpu, tmp_path: Path
) -> None:
    import yaml

    entries = {
        "any": _device_plugin("timeslicing-nvidia-gpu-replicas10.yaml").read_text(),
        "shared": _device_plugin("timeslicing-renameByDefault-replicas10.yaml").read_text(),
    }
    configmap = tmp_path / "time-slicing-config.yaml"
    configmap.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "time-slicing-config"},
                "data": entries,
            }
        )
    )
    gpu = make_fake_gpu(driver_version=DRIVER)
    labels = "nvidia.com/gpu.sharing-strategy=time-slicing,nvidia.com/device-plugin.config=shared"
    _, report = doctor(
        gpu,
        host_root(tmp_path),
        "--profiles",
        str(REPO / "profiles/team-a.yaml"),
        "--node-labels",
        labels,
        "--device-plugin-config",
        str(configmap),
    )
    shared = by_name(report)["device_plugin.timeslice[nvidia.com/gpu.shared]"]
    assert "(entry shared)" in shared["seen"] and shared["status"] == "warn"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--node-labels", "no-equals-sign"), "is not KEY=VALUE"),
        (("--device-plugin-config", "/nonexistent/config.yaml"), "cannot read"),
        (("--profiles", "/nonexistent/profiles"), "no such file or folder"),
    ],
)
def test_unusable_input_exits_2(
    make_fake_gpu, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    gpu = make_fake_gpu()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "secureml",
            "doctor",
            "node",
            "--root",
            str(host_root(tmp_path)),
            *args,
        ],
        env=gpu.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_time_slicing_settings_each_name_their_fix() -> None:
    from secureml.doctor.node_host import device_plugin_checks
    from secureml.doctor.node_pools import Expectations

    expected = Expectations(time_slice={"nvidia.com/gpu.shared": ["team-a"]})
    config = {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "failRequestsGreaterThanOne": True,
                "resources": [
                    {"name": "nvidia.com/gpu", "rename": "nvidia.com/gpu.shared", "replicas": 4}
                ],
            }
        },
    }
    (ok,) = device_plugin_checks(config, "cfg", expected)
    assert ok.status == "pass" and ok.fix == "" and "x4 replicas" in ok.seen
    config["sharing"]["timeSlicing"]["resources"][0]["replicas"] = 1
    config["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] = False
    (both,) = device_plugin_checks(config, "cfg", expected)
    assert both.status == "warn"
    assert "replicas to 2 or more" in both.fix and "failRequestsGreaterThanOne: true" in both.fix


def test_interval_reports_again_and_again(make_fake_gpu, tmp_path: Path) -> None:
    """The DaemonSet's mode: one JSON report per period, never exiting on its own."""
    gpu = make_fake_gpu(driver_version=DRIVER)
    argv = [sys.executable, "-m", "secureml", "doctor", "node", "--root", str(host_root(tmp_path)),
            "--interval", "1", "--format", "json"]  # fmt: skip
    errors = tmp_path / "stderr"
    with (
        errors.open("w") as stderr,
        subprocess.Popen(
            argv, env=gpu.env(), stdout=subprocess.PIPE, stderr=stderr, text=True
        ) as proc,
    ):
        try:
            decoder, text, reports = json.JSONDecoder(), "", []
            while len(reports) < 2:
                line = proc.stdout.readline() if proc.stdout else ""
                assert line, f"the doctor stopped reporting: {errors.read_text()}"
                text += line
                if line.startswith("}"):
                    reports.append(decoder.decode(text))
                    text = ""
            assert proc.poll() is None, errors.read_text()
            assert all(r["schema"] == "secureml.dev/doctor-node/v1" for r in reports)
        finally:
            proc.kill()
