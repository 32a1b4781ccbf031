"""A CycloneDX SBOM of a step image's Python packages, read from the image itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING

from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef
from secureml.images.context import SECUREML_VERSION
from secureml.images.oci import Image, open_image

if TYPE_CHECKING:
    from packageurl import PackageURL

_SITE_DIRS = ("site-packages", "dist-packages")


@dataclass(frozen=True, slots=True, order=True)
class PythonPackage:
    name: str
    version: str
    path: str  # the METADATA file it was read from


def _is_metadata(path: str) -> bool:
    parts = path.split("/")
    return (
        len(parts) >= 3
        and parts[-1] == "METADATA"
        and parts[-2].endswith(".dist-info")
        and parts[-3] in _SITE_DIRS
    )


def python_packages(image: Image) -> list[PythonPackage]:
    """Every installed distribution of the image (name and version from its METADATA), sorted."""
    found = set()
    for path, entry in image.files.entries.items():
        if not _is_metadata(path) or entry.content is None:
            continue
        headers = HeaderParser().parsestr(entry.content.decode("utf-8", errors="replace"))
        name, version = headers.get("Name"), headers.get("Version")
        if name and version:
            found.add(PythonPackage(str(name).strip(), str(version).strip(), path))
    return sorted(found)


def _pypi_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 normalisation, as the purl spec asks


def cyclonedx_json(image: Image) -> tuple[str, int]:
    """The image's SBOM as CycloneDX 1.6 JSON, and how many packages it lists."""
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom()
    root = Component(
        name=image.reference.split("@", 1)[0].removeprefix("oci:"),
        version=image.digest,
        type=ComponentType.CONTAINER,
        bom_ref=image.digest,
        purl=_image_purl(image),
    )
    bom.metadata.component = root
    bom.metadata.tools.components.add(
        Component(name="secureml", version=SECUREML_VERSION, type=ComponentType.APPLICATION)
    )
    packages = python_packages(image)
    components = []
    for package in packages:
        purl = PackageURL(type="pypi", name=_pypi_name(package.name), version=package.version)
        component = Component(
            name=package.name, version=package.version, purl=purl, bom_ref=purl.to_string()
        )
        if component not in bom.components:
            bom.components.add(component)
            components.append(component)
    bom.register_dependency(root, components)
    return JsonV1Dot6(bom).output_as_string(indent=2), len(components)


def _image_purl(image: Image) -> PackageURL | None:
    """`pkg:oci/<name>@<digest>?repository_url=<registry>/<repository>` for a registry image."""
    from packageurl import PackageURL

    if image.reference.startswith("oci:"):
        return None
    ref = ImageRef.parse(image.reference)
    return PackageURL(
        type="oci",
        name=ref.repository.rsplit("/", 1)[-1],
        version=image.digest,
        qualifiers={"repository_url": f"{ref.registry}/{ref.repository}"},
    )


def image_sbom(reference: str) -> tuple[str, int]:
    """Read `reference` (pinned by digest, or `oci:DIR`) and return its SBOM and package count."""
    return cyclonedx_json(open_image(reference, wanted=_is_metadata))


def sbom_statement(image: str, document: str) -> bytes:
    """The in-toto statement attesting `document` (the SBOM) about the pinned `image`: subject
    the image digest, predicate type CycloneDX, what `cosign attest --type cyclonedx` writes."""
    import json

    from secureml.profile.predicates import CYCLONEDX

    ref = ImageRef.parse(image)
    if ref.digest_hex is None:
        raise InputError(
            f"image {image} is not pinned by digest",
            why="an attestation is about one digest",
            fix="give REGISTRY/REPOSITORY@sha256:<digest>",
        )
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [
            {"name": f"{ref.registry}/{ref.repository}", "digest": {"sha256": ref.digest_hex}}
        ],
        "predicateType": CYCLONEDX,
        "predicate": json.loads(document),
    }
    return json.dumps(statement, sort_keys=True).encode()
