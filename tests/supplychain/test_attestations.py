"""Attestations required by the profile (`spec.images.attestations`), signed by the tests' private
Sigstore (tests/support/private_sigstore.py) and verified offline by sigstore-python: each unmet requirement is refused with
its own rule id; a complete set passes; bundles come from --bundles files or the registry."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from secureml.profile import predicates
from secureml.profile.model import TenantProfile
from secureml.supplychain.compile import verify_attestations_for_compile
from secureml.supplychain.verifier import SignatureVerifier
from tests.support.oci_server import OciServer
from tests.support.paths import REPO
from tests.support.private_sigstore import PrivateSigstore

GH = "https://token.actions.githubusercontent.com"
SIGNER = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
SLSA_GENERATOR = (
    "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/"
    "generator_container_slsa3.yml@refs/tags/v2.1.0"
)
STRANGER = "https://github.com/evil/fork/.github/workflows/build.yml@refs/heads/main"
DIGEST = "3c" * 32
OTHER = "4d" * 32
IMAGE = f"ghcr.io/acme/train@sha256:{DIGEST}"

SBOM = {"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}
SPDX_DOC = {"spdxVersion": "SPDX-2.3", "name": "train", "packages": []}


def scan(*severities: str) -> dict[str, Any]:
    """A cosign vuln predicate as Trivy writes it (`--format cosign-vuln`)."""
    findings = [
        {"VulnerabilityID": f"CVE-2026-{1000 + i}", "PkgName": "openssl", "Severity": severity}
        for i, severity in enumerate(severities)
    ]
    return {
        "invocation": {"parameters": None, "uri": "", "event_id": "", "builder.id": ""},
        "scanner": {
            "uri": "pkg:github/aquasecurity/trivy@0.58.0",
            "version": "0.58.0",
            "db": {"uri": "", "version": ""},
            "result": {
                "SchemaVersion": 2,
                "ArtifactName": IMAGE,
                "Results": [{"Target": "python-pkg", "Vulnerabilities": findings}],
            },
        },
        "metadata": {
            "scanStartedOn": "2026-12-01T10:00:00Z",
            "scanFinishedOn": "2026-12-01T10:01:00Z",
        },
    }


def provenance(builder: str) -> dict[str, Any]:
    return {
        "buildDefinition": {
            "buildType": "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1"
        },
        "runDetails": {"builder": {"id": builder}},
    }


REQUIREMENTS = [
    {"type": predicates.CYCLONEDX},
    {"type": predicates.COSIGN_VULN, "maxSeverity": "HIGH"},
    {
        "type": predicates.SLSA_V1,
        "builder": {"id": SLSA_GENERATOR},
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/slsa-framework/"}],
    },
]


@pytest.fixture(scope="module")
def pki() -> PrivateSigstore:
    return PrivateSigstore()


@pytest.fixture(scope="module")
def root(pki: PrivateSigstore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pki.write_trusted_root(tmp_path_factory.mktemp("root") / "trusted_root.json")


@pytest.fixture(scope="module")
def verifier(root: Path) -> SignatureVerifier:
    return SignatureVerifier(root)


@pytest.fixture(scope="module")
def profile(root: Path) -> TenantProfile:
    data = copy.deepcopy(yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text()))
    data["spec"]["images"]["signatures"]["trustedRoot"] = str(root)
    data["spec"]["images"]["attestations"] = REQUIREMENTS
    return TenantProfile.from_dict(data, source="test-profile")


def attest(
    pki: PrivateSigstore,
    predicate_type: str,
    predicate: dict[str, Any],
    *,
    digest: str = DIGEST,
    signer: str = SIGNER,
) -> bytes:
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "ghcr.io/acme/train", "digest": {"sha256": digest}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    return pki.sign_dsse(statement, subject=signer, issuer=GH)


@pytest.fixture(scope="module")
def complete(pki: PrivateSigstore) -> dict[str, bytes]:
    """The bundles of a compliant image, by --bundles file name part."""
    return {
        "sbom": attest(pki, predicates.CYCLONEDX, SBOM),
        "vuln": attest(pki, predicates.COSIGN_VULN, scan("LOW", "HIGH")),
        "provenance": attest(
            pki, predicates.SLSA_V1, provenance(SLSA_GENERATOR), signer=SLSA_GENERATOR
        ),
    }


def folder(tmp_path: Path, bundles: dict[str, bytes], digest: str = DIGEST) -> Path:
    for name, content in bundles.items():
        (tmp_path / f"sha256-{digest}.{name}.sigstore.json").write_bytes(content)
    return tmp_path


def check(
    profile: TenantProfile, verifier: SignatureVerifier, bundles_dir: Path | None, **kw: Any
) -> list[Any]:
    return verify_attestations_for_compile(
        [("train", IMAGE)], profile, bundles_dir, verifier=verifier, **kw
    )


def rules(results: list[Any]) -> list[str]:
    return [r.rule for r in results]


def test_a_complete_set_passes(profile, verifier, complete, tmp_path):
    assert check(profile, verifier, folder(tmp_path, complete)) == []


def test_a_missing_attestation(profile, verifier, complete, tmp_path):
    bundles = {k: v for k, v in complete.items() if k != "sbom"}
    [failure] = check(profile, verifier, folder(tmp_path, bundles))
    assert (failure.step, failure.image, failure.verified) == ("train", IMAGE, False)
    assert failure.rule == "image.attestation-missing"
    assert predicates.CYCLONEDX in failure.message and str(tmp_path) in failure.message
    assert f"sha256-{DIGEST}.<name>.sigstore.json" in failure.fix


def test_a_wrong_predicate_type(pki, profile, verifier, complete, tmp_path):
    bundles = {**complete, "sbom": attest(pki, predicates.SPDX, SPDX_DOC)}
    [failure] = check(profile, verifier, folder(tmp_path, bundles))
    assert failure.rule == "image.attestation-predicate"
    assert (
        f"sbom attestation of type {predicates.SPDX}, not the required {predicates.CYCLONEDX}"
        in failure.message
    )


def test_a_predicate_that_is_not_of_its_type(pki, profile, verifier, complete, tmp_path):
    bundles = {**complete, "sbom": attest(pki, predicates.CYCLONEDX, SPDX_DOC)}
    [failure] = check(profile, verifier, folder(tmp_path, bundles))
    assert (
        failure.rule == "image.attestation-predicate" and "not a CycloneDX BOM" in failure.message
    )


@pytest.mark.parametrize(
    ("severities", "refused"),
    [(("LOW", "CRITICAL"), "CVE-2026-1001 (CRITICAL)"), (("UNKNOWN",), "CVE-2026-1000 (UNKNOWN)")],
    ids=["critical", "unknown-fails-closed"],
)
def test_a_scan_above_the_allowed_severity(
    pki, profile, verifier, complete, tmp_path, severities, refused
):
    bundles = {**complete, "vuln": attest(pki, predicates.COSIGN_VULN, scan(*severities))}
    [failure] = check(profile, verifier, folder(tmp_path, bundles))
    assert failure.rule == "image.vuln-severity"
    assert "above the allowed HIGH" in failure.message and refused in failure.message


def test_a_provenance_from_an_untrusted_builder(pki, profile, verifier, complete, tmp_path):
    forged = attest(pki, predicates.SLSA_V1, provenance(STRANGER), signer=SLSA_GENERATOR)
    [failure] = check(profile, verifier, folder(tmp_path, {**complete, "provenance": forged}))
    assert failure.rule == "image.provenance-builder"
    assert f"built by {STRANGER}, not by the trusted builder {SLSA_GENERATOR}" in failure.message


def test_a_provenance_signed_by_someone_else(pki, profile, verifier, complete, tmp_path):
    # the right builder id, but signed by the image's own workflow, not the SLSA generator
    claimed = attest(pki, predicates.SLSA_V1, provenance(SLSA_GENERATOR), signer=SIGNER)
    [failure] = check(profile, verifier, folder(tmp_path, {**complete, "provenance": claimed}))
    assert failure.rule == "image.attestation-untrusted" and SIGNER in failure.message


def test_a_statement_for_another_digest(pki, profile, verifier, complete, tmp_path):
    other = attest(pki, predicates.CYCLONEDX, SBOM, digest=OTHER)
    [failure] = check(profile, verifier, folder(tmp_path, {**complete, "sbom": other}))
    assert failure.rule == "image.attestation-invalid"
    assert f"subjects are sha256:{OTHER}, not sha256:{DIGEST}" in failure.message


def test_every_failure_at_once(pki, profile, verifier, tmp_path):
    bundles = {
        "vuln": attest(pki, predicates.COSIGN_VULN, scan("CRITICAL")),
        "provenance": attest(pki, predicates.SLSA_V1, provenance(STRANGER), signer=SLSA_GENERATOR),
    }
    assert rules(check(profile, verifier, folder(tmp_path, bundles))) == [
        "image.attestation-missing",
        "image.vuln-severity",
        "image.provenance-builder",
    ]


def test_a_good_candidate_wins_over_a_bad_one(pki, profile, verifier, complete, tmp_path):
    bundles = {**complete, "vuln-old": attest(pki, predicates.COSIGN_VULN, scan("CRITICAL"))}
    assert check(profile, verifier, folder(tmp_path, bundles)) == []


def test_a_scan_edited_after_signing_is_refused(pki, profile, verifier, complete, tmp_path):
    document = json.loads(attest(pki, predicates.COSIGN_VULN, scan("CRITICAL")))
    statement = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
    statement["predicate"]["scanner"]["result"]["Results"][0]["Vulnerabilities"] = []
    document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    edited = {**complete, "vuln": json.dumps(document).encode()}
    [failure] = check(profile, verifier, folder(tmp_path, edited))
    assert failure.rule == "image.attestation-invalid" and "does not verify" in failure.message


def test_nothing_to_look_in(profile, verifier):
    assert set(rules(check(profile, verifier, None))) == {"image.attestation-missing"}


def test_an_unpinned_image(profile, verifier, tmp_path):
    [failure] = verify_attestations_for_compile(
        [("train", "ghcr.io/acme/train:v1")], profile, tmp_path, verifier=verifier
    )
    assert failure.rule == "image.attestation-missing" and "not pinned" in failure.message


@pytest.mark.parametrize("referrers_api", [True, False], ids=["referrers-api", "tag-fallback"])
def test_attestations_from_the_registry(pki, profile, verifier, complete, referrers_api):
    with OciServer(referrers_api=referrers_api) as registry:
        image = f"{registry.host}/acme/train@sha256:{DIGEST}"
        for content in complete.values():
            registry.attach_bundle("acme/train", f"sha256:{DIGEST}", content)
        steps = [("train", image), ("bare", f"{registry.host}/acme/bare@sha256:{OTHER}")]
        results = verify_attestations_for_compile(
            steps, profile, None, fetch=True, verifier=verifier
        )
    assert [(r.step, r.rule) for r in results] == [("bare", "image.attestation-missing")] * 3


def test_compile_reports_every_unmet_attestation(pki, root, complete, tmp_path):
    """`secureml compile` on the reference pipeline: the violations with task, rule and fix, as
    the other compile violations; with the full set the pipeline compiles."""
    from typer.testing import CliRunner

    from secureml.cli import app

    from .test_compile_cli import BUILDER, PIPELINE, pipeline_image

    image = pipeline_image()
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"]["trustedRoot"] = str(root)
    data["spec"]["images"]["attestations"] = REQUIREMENTS
    profile = tmp_path / "team-a.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / f"sha256-{image.digest_hex}.sigstore.json").write_bytes(
        pki.sign_image(image.name, image.digest_hex, subject=BUILDER, issuer=GH)
    )
    report = tmp_path / "report.json"
    args = ["compile", str(PIPELINE), "--profile", str(profile), "--bundles", str(bundles)]
    args += ["-o", str(tmp_path / "out.yaml"), "--report", str(report)]

    def statement_for(
        predicate_type: str, predicate: dict[str, Any], signer: str = SIGNER
    ) -> bytes:
        return attest(pki, predicate_type, predicate, digest=image.digest_hex, signer=signer)

    (bundles / f"sha256-{image.digest_hex}.vuln.sigstore.json").write_bytes(
        statement_for(predicates.COSIGN_VULN, scan("CRITICAL"))
    )
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1, refused.output
    violations = json.loads(report.read_text())["violations"]
    found = {(v["rule"], v["task"]) for v in violations}
    tasks = {v["task"] for v in violations}
    assert {rule for rule, _ in found} == {
        "image.attestation-missing",
        "image.vuln-severity",
    }
    # per task: the SBOM and the provenance missing, the scan above HIGH
    assert len(violations) == 3 * len(tasks) and all(v["fix"] for v in violations)
    assert "image.attestation-missing" in refused.output

    (bundles / f"sha256-{image.digest_hex}.vuln.sigstore.json").write_bytes(
        statement_for(predicates.COSIGN_VULN, scan("HIGH"))
    )
    (bundles / f"sha256-{image.digest_hex}.sbom.sigstore.json").write_bytes(
        statement_for(predicates.CYCLONEDX, SBOM)
    )
    (bundles / f"sha256-{image.digest_hex}.provenance.sigstore.json").write_bytes(
        statement_for(predicates.SLSA_V1, provenance(SLSA_GENERATOR), signer=SLSA_GENERATOR)
    )
    passed = CliRunner().invoke(app, args)
    assert passed.exit_code == 0, passed.output
