"""`secureml compile`: check a pipeline against a tenant profile and write the secured KFP YAML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from secureml.cli.options import (
    FormatOption,
    IdentityOption,
    IdentityRegexpOption,
    IssuerOption,
    OutputFormat,
    TrustedRootOption,
)
from secureml.cli.output import NO, emit_json, run_cli

if TYPE_CHECKING:
    from kfp.dsl.graph_component import GraphComponent

    from secureml.compile.compiler import CompiledPipeline, ImageVerifier
    from secureml.core.violation import Violation
    from secureml.profile.model import TenantProfile
    from secureml.supplychain.compile import ImageVerification
    from secureml.supplychain.dsse_key import SigningKey

SCHEMA = "secureml.dev/compile/v1"


@run_cli
def compile_command(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="Python file with the @dsl.pipeline to compile."),
    ],
    profile: Annotated[
        Path,
        typer.Option("--profile", metavar="FILE", help="The tenant's TenantProfile YAML."),
    ],
    pipeline: Annotated[
        str | None,
        typer.Option(
            "--pipeline", metavar="NAME", help="Which pipeline, when the file has several."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Pipeline YAML to write (default: FILE's name with .yaml, here); never an input.",
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", metavar="FILE", help="Also write the compliance report as JSON."),
    ] = None,
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles",
            metavar="DIR",
            help="Folder of image Sigstore bundles, sha256-<hex>.sigstore.json.",
        ),
    ] = None,
    fetch_bundles: Annotated[
        bool,
        typer.Option(
            "--fetch-bundles", help="Read missing image bundles from the registry (OCI referrers)."
        ),
    ] = False,
    check_images: Annotated[
        bool,
        typer.Option(
            "--check-images",
            help="Read each step image from the registry and check it can run a secure step "
            "(rule image.no-launcher, as `secureml image check`).",
        ),
    ] = False,
    resolve_entrypoints: Annotated[
        bool,
        typer.Option(
            "--resolve-entrypoints",
            help="Read a command-less container component's ENTRYPOINT from its digest-pinned "
            "image in the registry and put the launcher in front of it.",
        ),
    ] = False,
    require_signed_profile: Annotated[
        bool,
        typer.Option(
            "--require-signed-profile",
            help="Refuse a profile whose Sigstore bundle does not verify.",
        ),
    ] = False,
    profile_bundle: Annotated[
        Path | None,
        typer.Option(
            "--profile-bundle",
            metavar="FILE",
            help="The profile's bundle (default: PROFILE.sigstore.json).",
        ),
    ] = None,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    trusted_root: TrustedRootOption = None,
    attest: Annotated[
        Path | None,
        typer.Option(
            "--attest",
            metavar="FILE",
            help="Also write a signed in-toto record of this compile (a Sigstore bundle), "
            "keyless with the CI job's identity, or with --attest-key.",
        ),
    ] = None,
    attest_key: Annotated[
        Path | None,
        typer.Option(
            "--attest-key",
            metavar="PEM",
            help="Sign the attestation with this private key instead of keylessly.",
        ),
    ] = None,
    attest_trust_config: Annotated[
        Path | None,
        typer.Option(
            "--attest-trust-config",
            metavar="FILE",
            help="Keyless signing with a private Sigstore instance's ClientTrustConfig JSON "
            "(default: the public-good instance).",
        ),
    ] = None,
    output_format: FormatOption = "text",
) -> None:
    """Compile FILE for a tenant: every violation at once, or the YAML and a per-step report.

    Exit 0: compliant, YAML written. 1: rule violations (nothing written but --report). 2: unusable input (pipeline file, profile, flags, output path, --attest-key), a registry or Sigstore instance that cannot be reached, or no CI identity to sign --attest with.
    """
    from secureml.compile import report as reports
    from secureml.core.output_paths import check_output, write_text
    from secureml.supplychain.profiles import default_profile_bundle

    target = output or Path(file.stem + ".yaml")
    inputs = [file, profile, profile_bundle or default_profile_bundle(profile)]
    check_output(target, "-o" if output else "the default output", inputs)
    if report is not None:
        check_output(report, "--report", [*inputs, target])
    signing_key = _attestation_inputs(
        attest, attest_key, attest_trust_config, inputs, target, report
    )

    compiled = compile_secured(
        CompileInputs(
            file,
            profile,
            pipeline,
            bundles,
            fetch_bundles,
            check_images,
            resolve_entrypoints,
            require_signed_profile,
            profile_bundle,
            (certificate_identity, certificate_identity_regexp, certificate_oidc_issuer),
            trusted_root,
        )
    )
    result, content, tenant = compiled.result, compiled.profile_bytes, compiled.tenant
    if result is None:
        data = reports.violation_report(
            compiled.pipeline, tenant.metadata.name, compiled.violations
        )
        if report is not None:
            write_text(report, reports.to_json(data), "--report")
        _print(data, output_format, None)
        raise typer.Exit(NO) from None
    data = result.report()
    attestation = (
        _attestation(
            result.yaml_text.encode("utf-8"),
            target,
            (profile, content, tenant),
            data,
            signatures=compiled.signatures_checked,
            image_checks=check_images,
            signing_key=signing_key,
            trust_config=attest_trust_config,
        )
        if attest is not None
        else None
    )  # signed before anything is written: a failed signing leaves no unattested YAML behind
    write_text(target, result.yaml_text, "-o")
    if report is not None:
        write_text(report, reports.to_json(data), "--report")
    if attest is not None and attestation is not None:
        write_text(attest, attestation.decode(), "--attest")
    _print(data, output_format, target, attest)


@dataclass(frozen=True)
class CompileInputs:
    """What `compile` and `run --host` compile from: the same options, the same checks."""

    file: Path
    profile: Path
    pipeline: str | None
    bundles: Path | None
    fetch_bundles: bool
    check_images: bool
    resolve_entrypoints: bool
    require_signed_profile: bool
    profile_bundle: Path | None
    identity: tuple[str | None, str | None, str | None]  # identity, its regexp, the OIDC issuer
    trusted_root: str | None


@dataclass(frozen=True)
class Compiled:
    """A compile's outcome: the secured pipeline, or (`result` None) the violations."""

    pipeline: str
    tenant: TenantProfile
    profile_bytes: bytes
    result: CompiledPipeline | None
    violations: list[Violation]
    signatures_checked: bool


def compile_secured(inputs: CompileInputs, graph: GraphComponent | None = None) -> Compiled:
    """Read the profile (verified when asked), load the pipeline (or take `graph`, built in code)
    and compile it for the tenant: warnings on stderr, unusable input as a SecuremlError (exit 2)."""
    from secureml.compile.compiler import CompileError, compile_pipeline
    from secureml.compile.pipeline_loader import build_now, load_pipeline
    from secureml.core.errors import SecuremlError
    from secureml.profile import runtime_image
    from secureml.profile.model import parse_profile, read_profile_bytes

    profile = inputs.profile
    content = read_profile_bytes(profile)
    if inputs.require_signed_profile:
        _verify_profile(
            profile, content, inputs.profile_bundle, *inputs.identity, inputs.trusted_root
        )
    tenant = parse_profile(content, source=str(profile))
    for warning in runtime_image.warnings(tenant):
        typer.echo(f"warning: {warning}", err=True)
    # kfp builds the file's pipelines only where something reads them: compile_pipeline builds
    # its own (secureml._kfp.deferred)
    if graph is None:
        graph = load_pipeline(inputs.file, inputs.pipeline, deferred=True)
    bundles, fetch = inputs.bundles, inputs.fetch_bundles
    verifier = _image_verifier(tenant, profile, bundles, fetch)
    signatures_checked = verifier is not None
    if tenant.spec.images.attestations:
        from secureml.images.compilecheck import chain

        verifier = chain(verifier, _attestation_verifier(tenant, profile, bundles, fetch))
    if inputs.check_images:
        from secureml.images.compilecheck import chain, image_checks

        verifier = chain(verifier, image_checks(tenant))
    try:
        result = compile_pipeline(
            graph,
            tenant,
            image_verifier=verifier,
            entrypoint_resolver=_resolver(inputs.resolve_entrypoints),
            keep_component=False,
        )
    except CompileError as err:
        return Compiled(graph.name, tenant, content, None, list(err.violations), signatures_checked)
    except Exception as err:
        if not isinstance(err, SecuremlError):
            # the pipeline function raised in the compiler's trace: kfp's deferred build of it
            # says where, as the import did when kfp built it there
            build_now(graph, inputs.file)
        raise
    return Compiled(graph.name, tenant, content, result, [], signatures_checked)


def _attestation_inputs(
    attest: Path | None,
    key: Path | None,
    trust_config: Path | None,
    inputs: list[Path],
    target: Path,
    report: Path | None,
) -> SigningKey | None:
    """Check the --attest flags before compiling; the loaded key when signing with one."""
    from secureml.core.errors import InputError
    from secureml.core.output_paths import check_output

    if attest is None:
        if key is not None or trust_config is not None:
            raise InputError(
                "--attest-key and --attest-trust-config need --attest FILE",
                why="they say how to sign the attestation, which only --attest writes",
                fix="add --attest pipeline.intoto.sigstore.json",
            )
        return None
    if key is not None and trust_config is not None:
        raise InputError(
            "--attest-key and --attest-trust-config both given",
            why="an attestation is signed either with a key or keylessly through a Sigstore instance",
            fix="drop one of them",
        )
    given = [p for p in (report, key, trust_config) if p is not None]
    check_output(attest, "--attest", [*inputs, target, *given])
    if key is None:
        return None
    from secureml.supplychain.dsse_key import load_signing_key

    try:
        pem = key.read_bytes()
    except OSError as err:
        raise InputError(
            f"cannot read --attest-key {key}", why=err.strerror or str(err), fix="check the path"
        ) from None
    return load_signing_key(pem, str(key))


def _attestation(
    pipeline_yaml: bytes,
    target: Path,
    profile: tuple[Path, bytes, TenantProfile],
    data: dict[str, Any],
    *,
    signatures: bool,
    image_checks: bool,
    signing_key: SigningKey | None,
    trust_config: Path | None,
) -> bytes:
    """The signed in-toto statement of this compile (secureml.compile.attestation)."""
    from secureml.compile import attestation as records

    path, content, tenant = profile
    statement = records.compile_statement(
        pipeline_yaml=pipeline_yaml,
        output_name=target.name,
        profile_bytes=content,
        profile_file=str(path),
        profile=tenant,
        report=data,
        rules=records.checked_rules(tenant, data, signatures=signatures, image_checks=image_checks),
        signatures=signatures,
    )
    payload = records.statement_bytes(statement)
    if signing_key is not None:
        from secureml.supplychain.dsse_key import sign_statement

        return sign_statement(payload, signing_key)
    from secureml.supplychain.sigstore_sign import ambient_token, sign_statement_keyless

    return sign_statement_keyless(payload, ambient_token(), trust_config)


def _resolver(enabled: bool) -> Any:
    if not enabled:
        return None
    from secureml.supplychain.entrypoint import image_process

    return image_process


def _print(
    data: dict[str, Any],
    output_format: OutputFormat,
    written: Path | None,
    attestation: Path | None = None,
) -> None:
    """The report as JSON on stdout, or as text (on stderr when refused)."""
    from secureml.compile.report import render_text

    if output_format == "json":
        emit_json(
            {
                **data,
                "schema": SCHEMA,
                "output": str(written) if written else None,
                "attestation": str(attestation) if attestation else None,
            }
        )
        return
    typer.echo(render_text(data), err=written is None, nl=False)
    if written is not None:
        typer.echo(f"wrote {written}")
    if attestation is not None:
        typer.echo(f"wrote {attestation}")


def _image_verifier(
    tenant: TenantProfile, profile_path: Path, bundles: Path | None, fetch: bool
) -> ImageVerifier | None:
    """Signature checks when the profile requires them or bundles were given; otherwise none."""
    if not (tenant.spec.images.signatures.required or bundles is not None or fetch):
        return None

    def verify(steps: Sequence[tuple[str, str]]) -> list[ImageVerification]:
        from secureml.supplychain.compile import verify_images_for_compile

        return verify_images_for_compile(
            steps, tenant, bundles, fetch, profile_dir=profile_path.resolve().parent
        )

    return verify


def _attestation_verifier(
    tenant: TenantProfile, profile_path: Path, bundles: Path | None, fetch: bool
) -> ImageVerifier:
    """The profile's required attestations (`images.attestations`), checked whenever it lists any."""

    def verify(steps: Sequence[tuple[str, str]]) -> list[ImageVerification]:
        from secureml.supplychain.compile import verify_attestations_for_compile

        return verify_attestations_for_compile(
            steps, tenant, bundles, fetch, profile_dir=profile_path.resolve().parent
        )

    return verify


def _verify_profile(
    path: Path,
    content: bytes,
    bundle: Path | None,
    identity: str | None,
    regexp: str | None,
    issuer: str | None,
    trusted_root: str | None,
) -> None:
    from secureml.cli.verify import identities_from
    from secureml.supplychain.profiles import verify_signed_profile

    identities = identities_from(identity, regexp, issuer)
    signed = verify_signed_profile(
        path, bundle, identities, trusted_root or "production", content=content
    )
    typer.echo(f"profile {path}: signed by {signed.signer} (issuer {signed.issuer})", err=True)
