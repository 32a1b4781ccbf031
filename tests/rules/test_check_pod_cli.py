"""`secureml check-pod` end to end through the typer app: verdicts, formats, exit codes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from secureml.cli import app
from tests.support.paths import ATTACKS_DIR, PROFILES_DIR, REPO

ALLOWED = ATTACKS_DIR.parent / "allowed"
runner = CliRunner()


def run(*args: str, stdin: str | None = None):
    return runner.invoke(app, ["check-pod", *args], input=stdin)


def test_allowed_pod_exits_zero() -> None:
    result = run(
        str(ALLOWED / "team-a-timeslice.yaml"), "--profile", str(PROFILES_DIR / "team-a.yaml")
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"^ALLOWED +Pod/train ", result.output, re.M), result.output


def test_denied_json_report() -> None:
    attack = ATTACKS_DIR / "t05-env-ld-preload.yaml"
    result = run(str(ALLOWED / "team-a-cpu.yaml"), str(attack), "--profile",
                 str(PROFILES_DIR / "team-a.yaml"), "--format", "json")  # fmt: skip
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["policy"]["profile"] == "team-a"
    assert report["summary"] == {"objects": 2, "allowed": 1, "denied": 1}
    allowed, denied = report["objects"]
    assert allowed["verdict"] == "allowed" and allowed["violations"] == []
    assert denied["kind"] == "Pod" and denied["namespace"] == "team-a"
    assert denied["file"] == str(attack) and denied["doc_index"] == 0
    # the corpus's pods run the launcher of the step's image; team-a injects the platform's
    # (runtime.image), so the argv is refused beside the attack's own rules
    assert [v["rule"] for v in denied["violations"]] == [
        "secureml.forbiddenEnv",
        "secureml.launcherArgv",
        "secureml.loaderEnv",
    ]
    assert denied["violations"][0]["message"].startswith('container "main"')
    assert "/opt/secureml/bin/secureml-launch --" in denied["violations"][1]["message"]
    assert denied["violations"][2]["message"].startswith('container "main" env LD_PRELOAD')


def test_level_with_rule_filter_and_stdin() -> None:
    pod = (
        "kind: Pod\nmetadata: {name: p}\nspec: {hostPID: true, containers: [{name: c, image: x}]}\n"
    )
    assert run("-", "--level", "baseline", stdin=pod).exit_code == 1
    assert run("-", "--level", "restricted", "--rule", "pss.hostPorts", stdin=pod).exit_code == 0
    result = run("-", "--level", "baseline", "--rule", "pss.nope", stdin=pod)
    assert result.exit_code == 2 and "unknown rule id" in result.output


def test_unusable_input_exits_two() -> None:
    assert run("-", "--level", "baseline", stdin="kind: Pod\nspec: {}\n").exit_code == 2
    both = run("-", "--level", "baseline", "--profile", str(PROFILES_DIR / "team-a.yaml"), stdin="")
    assert both.exit_code == 2 and "exactly one of --profile or --level" in both.output
    assert run("-", stdin="").exit_code == 2


def test_invalid_profile_exits_two(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(
        "apiVersion: secureml.dev/v1alpha1\nkind: TenantProfile\nmetadata: {name: x}\nspec: {}\n"
    )
    result = run(str(ALLOWED / "team-a-cpu.yaml"), "--profile", str(bad))
    assert result.exit_code == 2 and "invalid TenantProfile" in result.output


def test_installed_command_reads_stdin() -> None:
    """The console script, as a user runs it, with a workload on standard input."""
    exe = shutil.which("secureml", path=str(Path(sys.executable).parent))
    assert exe is not None
    deployment = (
        "kind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n"
        "      containers: [{name: c, image: x, securityContext: {privileged: true}}]\n"
    )
    done = subprocess.run([exe, "check-pod", "-", "--level", "baseline", "--format", "json"],
                          input=deployment, capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    (obj,) = json.loads(done.stdout)["objects"]
    assert obj["kind"] == "Deployment" and obj["violations"][0]["rule"] == "pss.privileged"


def test_kfp_driver_pod_and_its_impostor() -> None:
    """KFP's driver pod passes without secureml labels; the same pod with an arbitrary image beside
    KFP's is a step pod and is refused for its labels."""
    impostor = ATTACKS_DIR / "t18-kfp-driver-plus-arbitrary-image.yaml"
    result = run(str(ALLOWED / "kfp-driver.yaml"), str(impostor), "--profile",
                 str(PROFILES_DIR / "team-a.yaml"), "--format", "json")  # fmt: skip
    assert result.exit_code == 1
    driver, denied = json.loads(result.stdout)["objects"]
    assert driver["verdict"] == "allowed" and driver["violations"] == []
    assert [v["rule"] for v in denied["violations"]] == [
        "secureml.requiredLabels",
        "secureml.isolationLevel",
        "secureml.readOnlyRootFilesystem",
        "secureml.gpuFreeOffGpuNodes",  # a step without a GPU must keep off team-a's GPU pools
        # the arbitrary image runs beside KFP's as a container without the launcher
        "secureml.tenantContainers",
        "secureml.launcherArgv",
        # unlabelled, so the mutating policy passed it by: no platform runtime
        "secureml.runtimeInjected",
        "secureml.launcherEnv",
        "secureml.groupNotRoot",
    ]
    # KFP's driver container has a writable root (the mutating policy sets it on labelled steps only).
    assert (
        denied["violations"][2]["message"]
        == 'container "main" must set securityContext.readOnlyRootFilesystem=true'
    )


def test_k8s_version_selects_the_pod_security_revision() -> None:
    """Pod Security 1.37 allows net.ipv4.tcp_notsent_lowat; 1.36 (the default) does not."""
    pod = (
        "kind: Pod\nmetadata: {name: p}\nspec:\n"
        "  securityContext: {sysctls: [{name: net.ipv4.tcp_notsent_lowat, value: '1'}]}\n"
        "  containers: [{name: c, image: x}]\n"
    )
    assert run("-", "--level", "baseline", stdin=pod).exit_code == 1
    result = run("-", "--level", "baseline", "--k8s-version", "1.37", "--format", "json", stdin=pod)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["policy"] == {"level": "baseline", "kubernetes": "1.37"}
    team_a = str(PROFILES_DIR / "team-a.yaml")
    assert run("-", "--profile", team_a, "--k8s-version", "1.37", "--rule", "pss.sysctls",
               stdin=pod).exit_code == 0  # fmt: skip
    assert run("-", "--profile", team_a, "--rule", "pss.sysctls", stdin=pod).exit_code == 1


def test_an_unquoted_date_is_a_string_as_kubernetes_reads_it(tmp_path: Path) -> None:
    """`value: 2026-01-01` is a YAML 1.1 timestamp; Kubernetes' reader keeps its text, so the
    allowed pod stays allowed (a `datetime.date` reached the CEL engines and raised)."""
    text = (ALLOWED / "team-a-timeslice.yaml").read_text()
    text = text.replace("  labels:\n", "  labels:\n    secureml.dev/built: 2026-01-01\n", 1)
    assert "secureml.dev/built: 2026-01-01" in text
    (tmp_path / "pod.yaml").write_text(text)
    for policy in (["--profile", str(PROFILES_DIR / "team-a.yaml")], ["--level", "baseline"]):
        result = run(str(tmp_path / "pod.yaml"), *policy, "--format", "json")
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout)
        assert report["summary"]["objects"] == 1


def _pod_text(name: str, **changes: str) -> str:
    text = (ATTACKS_DIR.parent / "allowed" / f"{name}.yaml").read_text()
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_each_refusal_has_a_fix_and_a_foreign_namespace_is_named(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        _pod_text("team-a-timeslice", **{"namespace: team-a": "namespace: team-b"}).replace(
            "    secureml.dev/isolation: timeslice-shim\n", ""
        )
    )
    result = run(str(pod), "--profile", str(PROFILES_DIR / "team-a.yaml"))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    refusals = [i for i, line in enumerate(lines) if line.startswith("Pod/train: secureml.")]
    assert refusals and all(lines[i + 1].startswith("  fix: meet secureml.") for i in refusals)
    isolation = next(line for line in lines if "secureml.isolationLevel:" in line)
    assert "has no secureml.dev/isolation label" in isolation and "weaker" not in isolation
    (note,) = [line for line in lines if line.startswith("note: ")]
    assert "is in namespace team-b, not team-a" in note
