"""`spec.images.attestations` in the profile: options only where their predicate type has them,
each problem at its line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from secureml.core.errors import ProfileError
from secureml.profile.model import load_profile

ROOT = Path(__file__).resolve().parents[2]
VULN = "https://cosign.sigstore.dev/attestation/vuln/v1"


def with_attestations(tmp_path: Path, block: str) -> Path:
    text = (ROOT / "profiles" / "team-a.yaml").read_text()
    marker = "    requireDigest: true\n"
    assert marker in text
    path = tmp_path / "profile.yaml"
    path.write_text(text.replace(marker, marker + "    attestations:\n" + block))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    return str(err.value).splitlines()[1:-1]


def test_a_complete_requirement_list_loads(tmp_path):
    profile = load_profile(
        with_attestations(
            tmp_path,
            "      - {type: https://cyclonedx.org/bom}\n"
            f"      - {{type: {VULN}, maxSeverity: HIGH}}\n"
            "      - type: https://slsa.dev/provenance/v1\n"
            "        builder: {id: https://github.com/slsa-framework/slsa-github-generator}\n"
            "        identities: [{issuer: https://token.actions.githubusercontent.com, "
            "subjectRegExp: '^https://github\\.com/slsa-framework/'}]\n",
        )
    )
    [sbom, vuln, slsa] = profile.spec.images.attestations
    assert (vuln.max_severity, slsa.builder.id) == (
        "HIGH",
        "https://github.com/slsa-framework/slsa-github-generator",
    )
    assert sbom.identities == [] and slsa.identities[0].issuer.startswith("https://token")


def test_options_on_the_wrong_type_are_refused_where_written(tmp_path):
    path = with_attestations(
        tmp_path,
        "      - {type: https://cyclonedx.org/bom, maxSeverity: HIGH}\n"
        f"      - {{type: {VULN}, builder: {{id: x}}}}\n"
        "      - {type: https://cyclonedx.org/bom}\n",
    )
    found = problems(path)
    assert len(found) == 3
    # the list starts on line 24 (after requireDigest and `attestations:`); each key where written
    assert found[0].startswith(f"  {path}:24:43: spec.images.attestations[0].maxSeverity: ")
    assert "not of https://cyclonedx.org/bom" in found[0]
    assert f"{path}:25:65: spec.images.attestations[1].builder: builder applies to SLSA" in found[1]
    assert f"{path}:26:10: spec.images.attestations[2].type: " in found[2]
    assert "already required by attestations[0]" in found[2]


def test_field_errors(tmp_path):
    path = with_attestations(
        tmp_path, "      - {type: cyclonedx, maxSeverity: SEVERE}\n      - {maxSeverity: LOW}\n"
    )
    found = "\n".join(problems(path))
    assert "spec.images.attestations[0].type: String should match pattern" in found
    assert "spec.images.attestations[0].maxSeverity: Input should be 'NONE', 'LOW'" in found
    assert "spec.images.attestations[1].type: Field required" in found


def test_someone_must_be_trusted_to_sign(tmp_path):
    path = with_attestations(tmp_path, "      - {type: https://spdx.dev/Document}\n")
    text = path.read_text().replace(
        "      identities:\n        - {issuer: https://token.actions.githubusercontent.com, "
        "subjectRegExp: '^https://github\\.com/acme/'}\n",
        "      identities: []\n",
    )
    path.write_text(text.replace("      required: true\n", "      required: false\n", 1))
    [problem] = problems(path)
    assert "spec.images.attestations[0].identities: nobody is trusted to sign" in problem


def test_the_example_in_the_docs_loads(tmp_path):
    """docs/supply-chain.md's example `spec.images` block is a valid profile section."""
    import yaml

    doc = (ROOT / "docs" / "supply-chain.md").read_text()
    section = doc.split("## Attestations required by the profile", 1)[1]
    example = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    data = yaml.safe_load((ROOT / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"]["identities"] = example["spec"]["images"]["signatures"][
        "identities"
    ]
    data["spec"]["images"]["attestations"] = example["spec"]["images"]["attestations"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    requirements = load_profile(path).spec.images.attestations
    assert [r.type for r in requirements] == [
        "https://cyclonedx.org/bom",
        VULN,
        "https://slsa.dev/provenance/v1",
    ]
