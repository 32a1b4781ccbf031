"""`secureml run` on the command line: a pipeline file in, a per-step audit summary out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from secureml.cli import app

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = Path(__file__).with_name("pipelines.py")
PROFILE = ROOT / "profiles" / "team-a.yaml"


def test_run_prints_the_audit_summary(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "numbers",
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--output-dir",
            str(tmp_path / "out"),
            "--arg",
            "count=3",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = result.output[result.output.index("secureml audit summary: pipeline numbers") :]
    assert "make-numbers  passed  0" in summary and "total         passed  0" in summary
    assert "spiffe://acme.example/ns/team-a/pipeline/numbers/step/total" in summary
    assert "2 of 2 step(s) passed." in summary
    assert "SIMULATED" not in summary
    assert sorted(
        p.name.split(".")[1] for p in (tmp_path / "out" / "audit").glob("*.audit.json")
    ) == [
        "make-numbers",
        "total",
    ]


def test_refusals_are_one_message_and_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    no_identity = runner.invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "numbers",
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--output-dir",
            str(tmp_path / "a"),
        ],
    )
    assert no_identity.exit_code == 2  # a missing --dev-identity is an unusable flag set
    assert "--dev-identity" in no_identity.output and "Traceback" not in no_identity.output
    not_local = runner.invoke(app, ["run", str(PIPELINES), "--profile", str(PROFILE)])
    assert not_local.exit_code == 2 and "--local" in not_local.output
    bad_arg = runner.invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--arg",
            "novalue",
        ],
    )
    assert bad_arg.exit_code == 2 and "NAME=VALUE" in bad_arg.output


def test_a_failing_step_exits_1_with_the_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "breaks",
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1
    assert "fail-on-purpose  FAILED at run  3" in result.output
    assert "the pipeline failed" in result.output


def test_a_pipeline_that_breaks_the_profile_never_runs(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(PIPELINES),
            "--pipeline",
            "foreign-image",
            "--profile",
            str(PROFILE),
            "--local",
            "--allow-unverified-images",
            "--dev-identity",
            "--output-dir",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1
    assert "from-elsewhere" in result.output and "docker.io" in result.output
    assert not (tmp_path / "out").exists()


def run_local(*options: str) -> Any:
    """`secureml run PIPELINES --profile PROFILE --local --dev-identity OPTIONS...`."""
    return CliRunner().invoke(
        app,
        ["run", str(PIPELINES), "--profile", str(PROFILE), "--local", "--dev-identity", *options],
    )


def test_a_local_run_says_what_it_checks_and_refuses_unverifiable_images_by_default(
    tmp_path: Path,
) -> None:
    refused = run_local("--output-dir", str(tmp_path / "refused"))
    assert refused.exit_code == 2, refused.output
    assert "requires signed images, and a local run verifies no signature" in refused.output
    assert "--allow-unverified-images" in refused.output
    assert not (tmp_path / "refused").exists()
    ran = run_local(
        "--pipeline", "numbers", "--allow-unverified-images", "--output-dir", str(tmp_path / "ran")
    )
    assert ran.exit_code == 0, ran.output
    first = ran.output.splitlines()[0]
    assert first.startswith("local run: the profile's compile rules") and "not checked:" in first
    assert "not checked in this local run: image signatures" in ran.output


def test_secrets_and_claims_are_refused_before_the_run_not_halfway(tmp_path: Path) -> None:
    result = run_local(
        *("--pipeline", "reads-a-secret", "--allow-unverified-images", "--simulate-gpu"),
        *("--output-dir", str(tmp_path / "out")),
    )
    assert result.exit_code == 2, result.output
    assert "read Kubernetes objects a local run does not have" in result.output
    assert "a Secret as a volume" in result.output
    assert "a PersistentVolumeClaim mount" in result.output
    assert not (tmp_path / "out" / "audit").exists()
