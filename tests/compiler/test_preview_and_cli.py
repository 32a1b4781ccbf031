"""Previewed pods (valid Kubernetes, backend hardening, tenant rules) and the `secureml compile` CLI."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from secureml.cli import app
from secureml.compile.compiler import compile_pipeline
from secureml.compile.pipeline_loader import load_pipeline
from secureml.core import contract
from secureml.pods.preview import preview_pods
from secureml.rules import evaluate, rules_for_profile
from tests.support.compiled import docs
from tests.support.paths import REPO
from tests.support.profiles import make_profile

REFERENCE = REPO / "pipelines" / "secure_finetune.py"
DEV_PROFILE = REPO / "examples" / "profiles" / "team-a-dev.yaml"


@pytest.fixture(scope="module")
def pods() -> dict[str, dict]:
    profile = make_profile()
    text = compile_pipeline(load_pipeline(REFERENCE), profile).yaml_text
    return preview_pods(docs(text), profile)


def test_previews_are_valid_pods_for_supported_kubernetes(pods: dict[str, dict]) -> None:
    assert list(pods) == ["evaluate", "prep", "train"]
    for version in ("1.34", "1.35", "1.36", "1.37"):
        for pod in pods.values():
            kubernetes_validate.validate(pod, version, strict=True)


def test_preview_has_what_the_backend_and_the_mutation_add(pods: dict[str, dict]) -> None:
    pod = pods["train"]
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    main = next(c for c in pod["spec"]["containers"] if c["name"] == contract.KFP_MAIN_CONTAINER)
    security = main["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert (security["runAsUser"], security["runAsGroup"], security["runAsNonRoot"]) == (
        1000,
        1000,
        True,
    )
    assert (
        security.get("readOnlyRootFilesystem") is True
    )  # added by the tenant's MutatingAdmissionPolicy
    assert main["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    # Argo's emissary, then KFP's launcher (tests/compiler/test_kfp_pod_shapes.py has the rest).
    assert main["command"][:2] == ["/var/run/argo/argoexec", "emissary"]
    assert "/kfp-launcher/launch" in main["command"] and main["command"][-1] == "--"
    assert main["args"][:2] == list(contract.RUNTIME_LAUNCHER_PREFIX)  # team-a names runtime.image
    init = pod["spec"]["initContainers"][2]  # after the runtime's and Argo's
    assert init["name"] == "kfp-launcher" and init["securityContext"]["runAsNonRoot"] is True


def test_previews_pass_the_tenant_admission_rules(pods: dict[str, dict]) -> None:
    rules = rules_for_profile(make_profile())
    for task, pod in pods.items():
        assert evaluate(pod, rules) == [], task


def test_a_privileged_preview_is_caught_by_the_same_rules(pods: dict[str, dict]) -> None:
    pod = json.loads(json.dumps(pods["prep"]))
    pod["spec"]["containers"][0]["securityContext"]["privileged"] = True
    assert "pss.privileged" in {v.rule for v in evaluate(pod, rules_for_profile(make_profile()))}


runner = CliRunner()


def test_cli_compiles_and_writes_yaml_and_report(tmp_path: Path) -> None:
    out, report = tmp_path / "p.yaml", tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "compile",
            str(REFERENCE),
            "--profile",
            str(DEV_PROFILE),
            "-o",
            str(out),
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "train" in result.output and "nvidia.com/mig-1g.10gb x1" in result.output
    data = json.loads(report.read_text())
    assert data["result"] == "compliant" and data["admissionChecked"] is True
    assert [s["isolation"] for s in data["steps"]] == ["none", "mig", "timeslice-shim"]
    first = out.read_bytes()
    again = runner.invoke(
        app, ["compile", str(REFERENCE), "--profile", str(DEV_PROFILE), "-o", str(out)]
    )
    assert again.exit_code == 0 and out.read_bytes() == first


def test_cli_reports_every_violation_and_exits_1(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "compile",
            str(REFERENCE),
            "--profile",
            str(REPO / "profiles" / "team-conf.yaml"),
            "-o",
            str(tmp_path / "p.yaml"),
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 1
    rules = sorted((v["task"], v["rule"]) for v in json.loads(report.read_text())["violations"])
    assert rules == [
        ("evaluate", "gpu.timeslice-forbidden"),
        ("evaluate", "image.registry"),
        ("evaluate", "isolation.below-tier"),
        ("prep", "image.registry"),
        ("train", "image.registry"),
    ]
    assert not (tmp_path / "p.yaml").exists()
    assert "Traceback" not in result.output


def test_cli_requires_signatures_when_the_profile_does(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "compile",
            str(REFERENCE),
            "--profile",
            str(REPO / "profiles" / "team-a.yaml"),
            "-o",
            str(tmp_path / "p.yaml"),
            "--bundles",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1
    assert result.output.count("[image.signature-missing]") == 3


@pytest.mark.parametrize(
    ("source", "args", "message"),
    [
        ("from kfp import dsl\n", [], "defines no pipeline or component"),
        ("raise RuntimeError('boom')\n", [], "RuntimeError: boom"),
        (None, ["--pipeline", "nope"], "no pipeline named 'nope'"),
    ],
)
def test_cli_input_errors_exit_2_without_traceback(
    tmp_path: Path, source: str | None, args: list[str], message: str
) -> None:
    file = tmp_path / "pipe.py"
    if source is None:
        shutil.copy(REFERENCE, file)
    else:
        file.write_text(source)
    result = runner.invoke(app, ["compile", str(file), "--profile", str(DEV_PROFILE), *args])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_loader_asks_which_pipeline_when_there_are_several(tmp_path: Path) -> None:
    file = tmp_path / "two.py"
    file.write_text(
        textwrap.dedent("""
        from kfp import dsl

        @dsl.component(base_image="python:3.11")
        def hello() -> str:
            return "hi"

        @dsl.pipeline(name="one")
        def one():
            hello()

        @dsl.pipeline(name="two")
        def two():
            hello()
    """)
    )
    result = runner.invoke(app, ["compile", str(file), "--profile", str(DEV_PROFILE)])
    assert result.exit_code == 2 and "--pipeline NAME: one, two" in result.output
    assert load_pipeline(file, "two").name == "two"


def test_reference_pipeline_runs_under_kfp_local(tmp_path: Path) -> None:
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    pipeline = load_pipeline(REFERENCE)
    result = pipeline(rows=50, epochs=60)
    assert result.output < 0.01  # the fitted line is close to y = 3x + 2
    outputs = list(tmp_path.rglob("model"))
    assert outputs and yaml.safe_load(outputs[0].read_text())["w"] == pytest.approx(3.0, abs=0.1)


def test_the_walkthroughs_rule_breaker_reports_what_the_walkthrough_shows(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "compile",
            str(REPO / "examples" / "rule_breaker.py"),
            "--profile",
            str(DEV_PROFILE),
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 1
    found = [(v["task"], v["rule"]) for v in json.loads(report.read_text())["violations"]]
    assert found == [
        ("train", "env.forbidden"),
        ("train", "gpu.mig-profile-not-allowed"),
        ("evaluate", "image.digest"),
        ("evaluate", "gpu.timeslice-memory"),
        ("evaluate", "gpu.timeslice-compute"),
        ("report", "image.registry"),
        ("report", "image.digest"),
        ("report", "runtime.install"),
    ]
    walkthrough = (REPO / "examples" / "README.md").read_text()
    assert all(f"[{rule}]" in walkthrough for _, rule in found)


def test_cli_refuses_an_unsigned_profile_when_a_signed_one_is_required(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "compile",
            str(REFERENCE),
            "--profile",
            str(DEV_PROFILE),
            "-o",
            str(tmp_path / "p.yaml"),
            "--require-signed-profile",
            "--certificate-identity",
            "platform@acme.example",
            "--certificate-oidc-issuer",
            "https://accounts.google.com",
        ],
    )
    assert result.exit_code == 1
    assert "has no signature bundle" in result.output
    assert not (tmp_path / "p.yaml").exists()


EXPECTED_BY_PROFILE = {
    "team-a": [],
    "team-dra": [],
    "team-conf": [
        ("evaluate", "gpu.timeslice-forbidden"),
        ("evaluate", "image.registry"),
        ("evaluate", "isolation.below-tier"),
        ("prep", "image.registry"),
        ("train", "image.registry"),
    ],
    "team-restricted": [
        ("evaluate", "gpu.timeslice-forbidden"),
        ("evaluate", "image.registry"),
        ("evaluate", "isolation.below-tier"),
        ("prep", "image.registry"),
        ("train", "gpu.mig-forbidden"),
        ("train", "image.registry"),
        ("train", "isolation.below-tier"),
    ],
}


@pytest.mark.parametrize("path", sorted((REPO / "profiles").glob("*.yaml")), ids=lambda p: p.stem)
def test_reference_pipeline_against_every_example_profile(path: Path) -> None:
    from secureml.compile.compiler import CompileError
    from secureml.profile.model import load_profile

    profile = load_profile(path)  # signatures are not looked at without an image verifier
    try:
        compile_pipeline(load_pipeline(REFERENCE), profile)
        found = []
    except CompileError as err:
        found = sorted((v.task, v.rule) for v in err.violations)
    if path.stem in EXPECTED_BY_PROFILE:
        assert found == EXPECTED_BY_PROFILE[path.stem]


def test_a_preview_violation_says_what_to_change_in_words_and_where_it_is_documented(
    tmp_path: Path,
) -> None:
    source = tmp_path / "pipeline.py"
    source.write_text(
        textwrap.dedent(
            """
            from kfp import dsl, kubernetes
            from secureml import TimeSlice, secure_component

            IMAGE = "ghcr.io/acme/ml-images/train@sha256:" + "a" * 64


            @secure_component(image=IMAGE, gpu=TimeSlice(memory="8Gi", compute=25))
            def train(x: int) -> int:
                return x


            @dsl.pipeline(name="tolerates")
            def tolerates() -> None:
                task = train(x=1)
                kubernetes.add_toleration(
                    task, key="other-team", operator="Exists", effect="NoSchedule"
                )
            """
        )
    )
    profile = REPO / "examples" / "profiles" / "team-a-dev.yaml"
    result = CliRunner().invoke(
        app, ["compile", str(source), "--profile", str(profile), "-o", str(tmp_path / "o.yaml")]
    )
    assert result.exit_code == 1, result.output
    assert "key=other-team operator=Exists value= effect=NoSchedule" in result.output
    assert "|" not in result.output.split("[secureml.tolerations]")[1].split("\n")[0]
    assert "fix: change the task to meet secureml.tolerations" in result.output
    assert "see docs" not in result.output
    assert "docs/rules.md and docs/admission-rules.md explain each rule" in result.output


def test_missing_signatures_say_why_they_are_required_and_how_to_sign_in_development(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        app,
        [
            "compile",
            str(REPO / "pipelines" / "secure_finetune.py"),
            "--profile",
            str(REPO / "profiles" / "team-a.yaml"),
            "-o",
            str(tmp_path / "o.yaml"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "[image.signature-missing]" in result.output
    (why,) = [line for line in result.output.splitlines() if line.startswith("why signatures:")]
    assert "spec.images.signatures.required" in why and "cosign sign" in why
    assert "examples/profiles/team-a-dev.yaml" in why and "docs/supply-chain.md" in why


def test_compiling_a_compiled_yaml_says_plainly_what_to_do(tmp_path: Path) -> None:
    compiled = tmp_path / "pipeline.yaml"
    compiled.write_text("pipelineInfo: {name: p}\nroot: {}\n")
    result = CliRunner().invoke(
        app,
        ["compile", str(compiled), "--profile", str(REPO / "profiles" / "team-a.yaml")],
    )
    assert result.exit_code == 2, result.output
    assert f"{compiled}: this is a compiled pipeline (YAML or JSON)" in result.output
    assert "run secureml compile on the .py file" in result.output
    assert "load_component_from_file" in result.output and "Traceback" not in result.output
