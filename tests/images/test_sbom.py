"""`secureml image sbom` / `image build --sbom`: a CycloneDX SBOM of the Python packages an image
holds, read from the image (an OCI layout or the OCI test registry), valid against the CycloneDX
1.6 schema; `--attest` signs it keylessly (a simulated CI job, the tests' private Sigstore) into a
bundle the compiler's attestation check accepts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from typer.testing import CliRunner

from secureml.cli import app
from tests.images.test_stepimage import GOOD, SITE, _image, _layer, _layout

ROOT = Path(__file__).resolve().parents[2]


def metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nbody\n".encode()


def test_sbom_lists_the_packages_of_the_image(tmp_path):
    base = _layer(
        {
            f"{SITE}/numpy-2.1.0.dist-info/METADATA": metadata("numpy", "2.1.0"),
            f"{SITE}/numpy/__init__.py": b"",
            "/usr/lib/python3/dist-packages/Jinja2-3.1.4.dist-info/METADATA": metadata(
                "Jinja2", "3.1.4"
            ),
            f"{SITE}/old_pkg-1.0.dist-info/METADATA": metadata("old_pkg", "1.0"),
            "/opt/notes/fake.dist-info/METADATA": metadata("outside", "9"),  # not a site folder
        }
    )
    step = _layer(
        {
            f"{SITE}/.wh.old_pkg-1.0.dist-info": b"",  # the step's layer removed it
            f"{SITE}/Torch_Audio-2.5.0.dist-info/METADATA": metadata("Torch_Audio", "2.5.0"),
        }
    )
    reference = _layout(tmp_path / "layout", _image([base, step], GOOD))
    out = tmp_path / "sbom.cdx.json"
    result = CliRunner().invoke(app, ["image", "sbom", reference, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "CycloneDX SBOM of 3 Python packages" in result.output
    text = out.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    bom = json.loads(text)
    assert bom["bomFormat"] == "CycloneDX" and bom["metadata"]["component"]["type"] == "container"
    assert sorted(c["purl"] for c in bom["components"]) == [
        "pkg:pypi/jinja2@3.1.4",
        "pkg:pypi/numpy@2.1.0",
        "pkg:pypi/torch-audio@2.5.0",
    ]


def test_build_sbom_needs_push(tmp_path):
    result = CliRunner().invoke(
        app,
        ["image", "build", str(tmp_path), "--tag", "localhost:5000/x:1", "--sbom", "s.json"],
    )
    assert result.exit_code == 2 and "--sbom needs --push" in result.output


def test_sbom_signed_keylessly_meets_the_profiles_sbom_requirement(tmp_path, monkeypatch):
    """`image sbom --attest` in a (simulated) GitHub Actions job against the tests' private
    Sigstore: the bundle it writes, put in a --bundles folder, meets a profile requiring a
    CycloneDX SBOM signed by that workflow, and no other signer's requirement."""
    import copy

    import yaml

    from secureml.profile.model import TenantProfile
    from secureml.supplychain.compile import verify_attestations_for_compile
    from tests.support.oci_server import OciServer
    from tests.support.private_sigstore import PrivateSigstore
    from tests.support.sigstore_services import GITHUB_ISSUER, SigstoreServices

    workflow = "https://github.com/acme/ml-images/.github/workflows/build.yml@refs/heads/main"
    pki = PrivateSigstore()
    blobs = _image(
        [_layer({f"{SITE}/numpy-2.1.0.dist-info/METADATA": metadata("numpy", "2.1.0")})], GOOD
    )
    manifest = blobs.pop("manifest")
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    bundle = bundles / f"sha256-{digest.split(':')[1]}.sbom.sigstore.json"
    config = tmp_path / "trust_config.json"
    with OciServer() as registry, SigstoreServices(pki, workflow) as services:
        registry.manifests[digest] = (manifest, "application/vnd.oci.image.manifest.v1+json")
        registry.blobs.update(blobs)
        image = f"{registry.host}/acme/train@{digest}"
        config.write_text(json.dumps(services.client_trust_config()))
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "job-token")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", services.url + "/token")
        args = ["image", "sbom", image, "-o", str(tmp_path / "sbom.json"), "--attest", str(bundle)]
        result = CliRunner().invoke(app, [*args, "--attest-trust-config", str(config)])
    assert result.exit_code == 0, result.output
    assert "signed https://cyclonedx.org/bom attestation" in result.output

    data = yaml.safe_load((ROOT / "profiles" / "team-a.yaml").read_text())
    data = copy.deepcopy(data)
    data["spec"]["images"]["signatures"]["trustedRoot"] = str(
        pki.write_trusted_root(tmp_path / "root.json")
    )
    requirement = {"type": "https://cyclonedx.org/bom"}
    for signer, expected in (
        (workflow, []),
        ("https://github.com/evil/x", ["image.attestation-untrusted"]),
    ):
        requirement["identities"] = [{"issuer": GITHUB_ISSUER, "subject": signer}]
        data["spec"]["images"]["attestations"] = [requirement]
        profile = TenantProfile.from_dict(data, source="test")
        results = verify_attestations_for_compile([("train", image)], profile, bundles)
        assert [r.rule for r in results] == expected


def test_attest_needs_a_ci_identity(tmp_path, monkeypatch):
    for name in (
        "GITHUB_ACTIONS",
        "GOOGLE_SERVICE_ACCOUNT_NAME",
        "BUILDKITE",
        "GITLAB_CI",
        "CIRCLECI",
    ):
        monkeypatch.delenv(name, raising=False)
    image = "ghcr.io/acme/train@sha256:" + "a" * 64
    out, bundle = tmp_path / "s.json", tmp_path / "b.json"
    result = CliRunner().invoke(
        app, ["image", "sbom", image, "-o", str(out), "--attest", str(bundle)]
    )
    assert result.exit_code == 2 and "no ambient OIDC identity" in result.output
    assert not out.exists() and not bundle.exists()
