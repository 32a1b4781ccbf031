"""`secureml image sbom` / `image build --sbom`: a CycloneDX SBOM of the Python packages an image
holds, read from the image (an OCI layout written here), valid against the CycloneDX 1.6 schema."""

from __future__ import annotations

import json

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from test_stepimage import GOOD, SITE, _image, _layer, _layout
from typer.testing import CliRunner

from secureml.cli import app


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
