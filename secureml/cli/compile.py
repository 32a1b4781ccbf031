"""`secureml compile`: check a pipeline against a tenant profile and write the secured KFP YAML."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from secureml.cli import app, run_cli
from secureml.cli.verify import IdentityOpt, IdentityRegexpOpt, IssuerOpt, TrustedRootOpt

if TYPE_CHECKING:
    from secureml.compiler import ImageVerifier
    from secureml.profile import TenantProfile
    from secureml.supplychain.compile import ImageVerification


@app.command("compile")
@run_cli
def compile_command(
    file: Annotated[Path, typer.Argument(help="Python file with the @dsl.pipeline to compile.")],
    profile: Annotated[Path, typer.Option("--profile", help="The tenant's TenantProfile YAML.")],
    pipeline: Annotated[
        str | None, typer.Option("--pipeline", help="Which pipeline, when the file has several.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", help="Pipeline YAML to write (default: FILE's name with .yaml, here)."
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Also write the compliance report as JSON.")
    ] = None,
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles", help="Folder of image Sigstore bundles, sha256-<hex>.sigstore.json."
        ),
    ] = None,
    fetch_bundles: Annotated[
        bool,
        typer.Option(
            "--fetch-bundles", help="Read missing image bundles from the registry (OCI referrers)."
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
            "--profile-bundle", help="The profile's bundle (default: PROFILE.sigstore.json)."
        ),
    ] = None,
    certificate_identity: IdentityOpt = None,
    certificate_identity_regexp: IdentityRegexpOpt = None,
    certificate_oidc_issuer: IssuerOpt = None,
    trusted_root: TrustedRootOpt = None,
) -> None:
    """Compile FILE for a tenant: every violation at once (exit 1), or the YAML and a per-step report."""
    from secureml import report as reports
    from secureml.compiler import CompileError, compile_pipeline
    from secureml.pipeline_loader import load_pipeline
    from secureml.profile import parse_profile, read_profile_bytes

    content = read_profile_bytes(profile)
    if require_signed_profile:
        _verify_profile(
            profile,
            content,
            profile_bundle,
            certificate_identity,
            certificate_identity_regexp,
            certificate_oidc_issuer,
            trusted_root,
        )
    tenant = parse_profile(content, source=str(profile))
    graph = load_pipeline(file, pipeline)
    verifier = _image_verifier(tenant, profile, bundles, fetch_bundles)
    try:
        result = compile_pipeline(graph, tenant, image_verifier=verifier)
    except CompileError as err:
        data = reports.violation_report(graph.name, tenant.metadata.name, err.violations)
        if report is not None:
            report.write_text(reports.to_json(data), encoding="utf-8")
        typer.echo(reports.render_text(data), err=True, nl=False)
        raise typer.Exit(1) from None
    target = output or Path(file.stem + ".yaml")
    result.write(target)
    data = result.report()
    if report is not None:
        report.write_text(reports.to_json(data), encoding="utf-8")
    typer.echo(reports.render_text(data), nl=False)
    typer.echo(f"wrote {target}")


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


def _verify_profile(
    path: Path,
    content: bytes,
    bundle: Path | None,
    identity: str | None,
    regexp: str | None,
    issuer: str | None,
    trusted_root: str | None,
) -> None:
    from secureml.supplychain.identity import identities_from_flags
    from secureml.supplychain.profiles import verify_signed_profile

    identities = identities_from_flags(identity=identity, identity_regexp=regexp, issuer=issuer)
    signed = verify_signed_profile(
        path, bundle, identities, trusted_root or "production", content=content
    )
    typer.echo(f"profile {path}: signed by {signed.signer} (issuer {signed.issuer})", err=True)
