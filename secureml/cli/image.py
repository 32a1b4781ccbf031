"""`secureml image`: build step images and the platform's images, check an image, write its SBOM."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from secureml.cli.options import FormatOption
from secureml.cli.output import emit_json, run_cli
from secureml.core.errors import InputError
from secureml.core.image_ref import ImageRef

if TYPE_CHECKING:
    from secureml.images.platform import BuiltImage

SCHEMA = "secureml.dev/image-check/v1"  # docs/schemas/image-check.schema.json

app = typer.Typer(
    name="image",
    help="Build step images and the platform runtime image; check an image before a step uses it.",
    no_args_is_help=True,
)

TagOpt = Annotated[
    str, typer.Option("--tag", "-t", help="REGISTRY/REPOSITORY:TAG to build (and push) as.")
]
PushOpt = Annotated[
    bool, typer.Option("--push", help="Push to the tag's registry and print the digest reference.")
]
BuilderOpt = Annotated[
    str | None,
    typer.Option("--builder", help="buildah, podman or docker (default: the first found)."),
]
BaseOpt = Annotated[
    str,
    typer.Option(
        "--base",
        help="The Debian image to build FROM, or `debian` for one made here with debootstrap.",
    ),
]
RecordOpt = Annotated[
    Path | None,
    typer.Option("--record", help="Write what was built (reference, digest, versions) as JSON."),
]


TrustConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--attest-trust-config",
        metavar="FILE",
        help="Keyless signing with a private Sigstore instance's ClientTrustConfig JSON "
        "(default: the public-good instance).",
    ),
]


def _tag(text: str) -> ImageRef:
    ref = ImageRef.parse(text)
    if ref.digest is not None:
        raise InputError(
            f"--tag {text} carries a digest",
            why="the registry assigns the digest when the image is pushed",
            fix="pass REGISTRY/REPOSITORY:TAG",
        )
    return ref


def _base(base: str) -> str:
    if base == "debian":
        from secureml.images.debian import base_image

        return base_image()
    return base


def _report_built(name: str, built: BuiltImage, push: bool, record: Path | None) -> None:
    print(f"built {name} with {built.builder} in {built.seconds:.0f}s as {built.tag}")
    if record is not None:
        built.record(record)
        print(f"recorded in {record}")
    if push and built.reference:
        print(built.reference)


def _build_platform(
    name: str, tag: str, push: bool, builder: str | None, base: str, record: Path | None
) -> None:
    from secureml.images import platform
    from secureml.images.builders import find_builder

    ref = _tag(tag)
    found = find_builder(builder)
    print(f"building images/{name} with {found.name} ({found.path})")
    built = platform.build(name, found, base=_base(base), push_to=ref if push else None)
    _report_built(name, built, push, record)


@app.command("build-runtime")
@run_cli
def build_runtime(
    tag: TagOpt,
    push: PushOpt = False,
    builder: BuilderOpt = None,
    base: BaseOpt = "docker.io/library/debian:bookworm-slim",
    record: RecordOpt = None,
) -> None:
    """Build the platform runtime image (images/runtime-injector): the launcher and the shim the
    profile's `runtime.image` injects into every step. Prints REGISTRY/REPOSITORY@sha256:...
    for the profile when pushed.

    Exit 0: built (and pushed). 2: unusable input, no builder, or a build or push that failed."""
    _build_platform("runtime-injector", tag, push, builder, base, record)


@app.command("build-base")
@run_cli
def build_base(
    name: Annotated[str, typer.Argument(help="runtime or cuda.")],
    tag: TagOpt,
    push: PushOpt = False,
    builder: BuilderOpt = None,
    base: BaseOpt = "docker.io/library/debian:bookworm-slim",
    record: RecordOpt = None,
) -> None:
    """Build a step base image of images/ (runtime, or cuda on top of the local runtime).

    Exit 0: built (and pushed). 2: unusable input, no builder, or a build or push that failed."""
    if name not in ("runtime", "cuda"):
        raise InputError(
            f"no base image {name!r}", why="images/ holds runtime and cuda", fix="pass one of them"
        )
    _build_platform(name, tag, push, builder, base, record)


@app.command("build")
@run_cli
def build(
    context: Annotated[Path, typer.Argument(help="The step's folder (requirements.txt, code).")],
    tag: TagOpt,
    base: Annotated[
        str,
        typer.Option(
            "--from", help="runtime, cuda (secureml's base images) or an image reference."
        ),
    ] = "runtime",
    push: PushOpt = False,
    builder: BuilderOpt = None,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite-containerfile", help="Replace a Containerfile you wrote."),
    ] = False,
    sbom: Annotated[
        Path | None,
        typer.Option(
            "--sbom",
            metavar="FILE",
            help="With --push: write a CycloneDX SBOM of the pushed image's Python packages.",
        ),
    ] = None,
    sbom_attest: Annotated[
        Path | None,
        typer.Option(
            "--sbom-attest",
            metavar="BUNDLE",
            help="With --sbom: also sign it as a CycloneDX attestation (keyless, the CI job's "
            "identity) and write the Sigstore bundle.",
        ),
    ] = None,
    attest_trust_config: TrustConfigOpt = None,
) -> None:
    """Write CONTEXT/Containerfile for the step's requirements and build it; with --push, print
    the digest-pinned reference to use as the component's image.

    Exit 0: built (and pushed). 2: unusable input, no builder, or a build or push that failed."""
    from secureml.images import userimage
    from secureml.images.builders import find_builder

    ref = _tag(tag)
    if sbom is not None and not push:
        raise InputError(
            "--sbom needs --push",
            why="the SBOM describes the image by the digest its registry stored",
            fix="add --push, or run `secureml image sbom` on the pushed digest later",
        )
    if sbom_attest is not None and sbom is None:
        raise InputError(
            "--sbom-attest needs --sbom FILE",
            why="the attestation signs the SBOM that --sbom writes",
            fix="add --sbom FILE",
        )
    found = find_builder(builder)
    print(f"building {context} FROM {userimage.base_reference(base)} with {found.name}")
    pinned = userimage.build(context, base, ref, found, push=push, overwrite=overwrite)
    if pinned is None:
        print(f"built {ref} (not pushed: pass --push for the digest reference a step needs)")
        return
    print(pinned)
    if sbom is not None:
        _write_sbom(pinned, sbom, ("--sbom", "--sbom-attest"), sbom_attest, attest_trust_config)


def _write_sbom(
    image: str,
    target: Path,
    flags: tuple[str, str],
    attest: Path | None,
    trust_config: Path | None,
) -> None:
    """The SBOM to `target`; with `attest`, signed keylessly as an attestation too (`flags`: the
    options that named the two files, for messages)."""
    from secureml.core.output_paths import write_text
    from secureml.images.sbom import image_sbom, sbom_statement

    if trust_config is not None and attest is None:
        raise InputError(
            f"--attest-trust-config needs {flags[1]} BUNDLE",
            why="it says where to sign the attestation, which only that option writes",
            fix=f"add {flags[1]} BUNDLE",
        )
    token = None
    if attest is not None:
        from secureml.supplychain.sigstore_sign import ambient_token

        sbom_statement(image, "{}")  # refuses an unpinned image before any work
        token = ambient_token()
    document, count = image_sbom(image)
    write_text(target, document, flags[0])
    print(f"wrote {target}: CycloneDX SBOM of {count} Python packages in {image}")
    if attest is not None and token is not None:
        from secureml.supplychain.sigstore_sign import sign_statement_keyless

        statement = sbom_statement(image, document)
        bundle = sign_statement_keyless(statement, token, trust_config)
        write_text(attest, bundle.decode(), flags[1])
        print(f"wrote {attest}: the SBOM as a signed https://cyclonedx.org/bom attestation")
    elif not image.startswith("oci:"):
        print(
            "attach it: cosign attest --new-bundle-format --type cyclonedx "
            f"--predicate {target} {image}"
        )


@app.command("sbom")
@run_cli
def sbom_command(
    image: Annotated[str, typer.Argument(help="REGISTRY/REPOSITORY@sha256:... or oci:DIR.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="FILE", help="The SBOM file to write.")
    ],
    attest: Annotated[
        Path | None,
        typer.Option(
            "--attest",
            metavar="BUNDLE",
            help="Also sign the SBOM as a CycloneDX attestation of the image (keyless, the CI "
            "job's identity) and write the Sigstore bundle.",
        ),
    ] = None,
    attest_trust_config: TrustConfigOpt = None,
) -> None:
    """Write a CycloneDX SBOM of the image's Python packages (read from the image itself), the
    predicate of an https://cyclonedx.org/bom attestation.

    Exit 0: written. 2: unusable input, a registry or Sigstore instance that cannot be reached,
    or no CI identity to sign --attest with."""
    _write_sbom(image, output, ("-o", "--attest"), attest, attest_trust_config)


@app.command("check")
@run_cli
def check(
    image: Annotated[str, typer.Argument(help="REGISTRY/REPOSITORY@sha256:... or oci:DIR.")],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            help="The tenant profile: with a runtime.image, the launcher is injected and the "
            "step image need not carry it.",
        ),
    ] = None,
    output_format: FormatOption = "text",
) -> None:
    """Say whether the image can run a secure step (or serve as the platform runtime image).

    Exit 0: it can. 1: it lacks something (each finding says what). 2: unusable input, or a
    registry that cannot be reached."""
    from secureml.images.check import check as check_image
    from secureml.images.check import problems

    injected = None
    if profile is not None:
        from secureml.profile.model import load_profile

        injected = load_profile(profile).spec.runtime.image is not None
    opened, findings = check_image(image, injected=injected)
    if output_format == "json":
        rows = [
            {"check": f.check, "status": f.status, "message": f.message, "fix": f.fix}
            for f in findings
        ]
        emit_json({"schema": SCHEMA, "image": image, "digest": opened.digest, "findings": rows})
    else:
        print(f"{image}")
        for finding in findings:
            print(f"  {finding.status:<8} {finding.check:<13} {finding.message}")
            if finding.status == "problem" and finding.fix:
                print(f"  {'':<8} {'':<13} fix: {finding.fix}")
    if problems(findings):
        raise typer.Exit(1)
