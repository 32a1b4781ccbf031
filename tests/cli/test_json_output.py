"""`--format json` on every command that reports: one JSON document on stdout that satisfies the
command's schema in docs/schemas/ (docs/cli.md), whatever the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from secureml.cli import app
from tests.support.json_schemas import SCHEMAS, check
from tests.support.sigstore_fixtures import CONFORMANCE, protocol_args, require_fixtures

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "team-a.yaml"
DEV_PROFILE = REPO / "examples" / "profiles" / "team-a-dev.yaml"
PIPELINE = REPO / "pipelines" / "secure_finetune.py"
runner = CliRunner()


def invoke(*args: str, stdin: str | None = None) -> tuple[int, object]:
    result = runner.invoke(app, list(args), input=stdin)
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


def test_every_schema_is_a_valid_json_schema() -> None:
    names = sorted(p.name for p in SCHEMAS.glob("*.schema.json"))
    assert names == [
        f"{n}.schema.json"
        for n in (
            "check-pod",
            "compile-attestation",
            "compile",
            "doctor-cluster",
            "doctor-logs",
            "doctor-node",
            "doctor-pipeline",
            "image-check",
            "profile-diff",
            "profile-explain",
            "profile-validate",
            "run-remote",
            "run",
            "verify-pipeline",
            "verify",
        )
    ]
    for name in names:
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMAS / name).read_text()))


def test_check_pod() -> None:
    pod = (
        "kind: Pod\nmetadata: {name: p}\nspec: {hostPID: true, containers: [{name: c, image: x}]}\n"
    )
    code, document = invoke("check-pod", "-", "--level", "baseline", "--format", "json", stdin=pod)
    assert code == 1
    check("check-pod", document)


def test_profile_validate(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: secureml.dev/v1alpha1\nkind: TenantProfile\nmetadata: {name: x}\nspec: {}\n"
    )
    code, document = invoke("profile", "validate", str(PROFILE), str(bad), "--format", "json")
    assert code == 2
    check("profile-validate", document)
    assert [p["valid"] for p in document["profiles"]] == [True, False]  # type: ignore[index]


def test_profile_diff(tmp_path: Path) -> None:
    changed = tmp_path / "team-a.yaml"
    changed.write_text(PROFILE.read_text().replace("tier: internal", "tier: public"))
    assert changed.read_text() != PROFILE.read_text()
    same_code, same = invoke("profile", "diff", str(PROFILE), str(PROFILE), "--format", "json")
    code, document = invoke("profile", "diff", str(PROFILE), str(changed), "--format", "json")
    assert (same_code, code) == (0, 1)
    check("profile-diff", same)
    check("profile-diff", document)
    assert document["changed"] and document["diff"].startswith("---")  # type: ignore[index]
    assert {"field": "spec.tier", "old": '"internal"', "new": '"public"'} in document["fields"]  # type: ignore[index]
    assert same["fields"] == same["rules"] == same["objects"] == []  # type: ignore[index]


def test_profile_explain() -> None:
    code, document = invoke("profile", "explain", str(PROFILE), "--format", "json")
    assert code == 0
    check("profile-explain", document)
    assert document["tenant"] == "team-a" and document["rules"]  # type: ignore[index]


def test_compile_compliant_and_refused(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    code, document = invoke(
        "compile", str(PIPELINE), "--profile", str(DEV_PROFILE), "-o", str(out), "--format", "json"
    )
    assert code == 0 and out.is_file()
    check("compile", document)
    refused_code, refused = invoke(
        "compile",
        str(PIPELINE),
        "--profile",
        str(PROFILE),
        "-o",
        str(tmp_path / "r.yaml"),
        "--format",
        "json",
    )
    assert refused_code == 1 and not (tmp_path / "r.yaml").exists()
    check("compile", refused)
    assert refused["output"] is None and refused["violations"]  # type: ignore[index]


def test_run(tmp_path: Path) -> None:
    code, document = invoke(
        "run", str(REPO / "tests" / "localrun" / "pipelines.py"), "--pipeline", "numbers",
        "--profile", str(PROFILE), "--local",
            "--allow-unverified-images", "--dev-identity",
        "--output-dir", str(tmp_path / "out"), "--arg", "count=3", "--format", "json",
    )  # fmt: skip
    assert code == 0
    check("run", document)
    assert [s["step"] for s in document["steps"]] == ["make-numbers", "total"]  # type: ignore[index]


@pytest.mark.parametrize("case", ["happy-path-v0.3-new-mediaType", "managed-key-happy-path"])
def test_verify_bundle(case: str) -> None:
    require_fixtures()
    code, document = invoke(
        *protocol_args(CONFORMANCE / case, digest_mode=False), "--format", "json"
    )
    assert code == 0
    check("verify", document)
