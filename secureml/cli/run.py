"""`secureml run FILE --profile PROFILE --local`: run a pipeline here, under the launcher."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from secureml.cli.options import (
    FormatOption,
    IdentityOption,
    IdentityRegexpOption,
    IssuerOption,
    TrustedRootOption,
)
from secureml.cli.output import NO, emit_json, run_cli
from secureml.core.errors import InputError

if TYPE_CHECKING:
    from secureml.localrun.runner import RunResult

SCHEMA = "secureml.dev/run/v1"


def _arguments(pairs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` pipeline arguments as text; the run reads each as its parameter's declared type."""
    arguments: dict[str, str] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise InputError(f"--arg {pair!r} is not NAME=VALUE", fix="write e.g. --arg epochs=3")
        arguments[name] = raw
    return arguments


# What a local run does and does not check, said at its start and in its summary.
NOT_CHECKED = (
    "image signatures and the image policy (no image is pulled: the steps run in this Python "
    "environment), NetworkPolicy, quotas and node placement"
)
LOCAL_CHECKS = (
    "local run: the profile's compile rules and admission rules on the pods the pipeline "
    "becomes, then every step under the launcher (identity, GPU preflight and scrub, quota shim, "
    f"audit record); not checked: {NOT_CHECKED}"
)


@run_cli
def run(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="Python file that defines the pipeline.")
    ],
    profile: Annotated[
        Path,
        typer.Option("--profile", metavar="FILE", help="TenantProfile YAML to compile against."),
    ],
    local: Annotated[
        bool, typer.Option("--local", help="Run on this machine with kfp.local.")
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            metavar="URL",
            help="Run on this Kubeflow Pipelines server instead (the URL kfp.Client takes: the "
            "KFP UI or the ml-pipeline service): compiled as `compile` does, submitted as the "
            "bundle's runner service account, followed to its end.",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=1.0,
            help="With --host: stop waiting after SECONDS (exit 1; the run goes on in KFP).",
        ),
    ] = 3600.0,
    poll: Annotated[
        float,
        typer.Option(
            "--poll", metavar="SECONDS", min=0.01, help="With --host: seconds between two reads."
        ),
    ] = 2.0,
    experiment: Annotated[
        str,
        typer.Option("--experiment", metavar="NAME", help="With --host: the KFP experiment."),
    ] = "secureml",
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run-name",
            metavar="NAME",
            help="With --host: the run's name (default: pipeline and time).",
        ),
    ] = None,
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles",
            metavar="DIR",
            help="With --host: folder of image Sigstore bundles, as `compile --bundles`.",
        ),
    ] = None,
    fetch_bundles: Annotated[
        bool,
        typer.Option(
            "--fetch-bundles",
            help="With --host: read missing image bundles from the registry, as `compile`.",
        ),
    ] = False,
    require_signed_profile: Annotated[
        bool,
        typer.Option(
            "--require-signed-profile",
            help="With --host: refuse a profile whose Sigstore bundle does not verify, as `compile`.",
        ),
    ] = False,
    profile_bundle: Annotated[
        Path | None,
        typer.Option(
            "--profile-bundle",
            metavar="FILE",
            help="With --host: the profile's bundle (default: PROFILE.sigstore.json).",
        ),
    ] = None,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    trusted_root: TrustedRootOption = None,
    pipeline: Annotated[
        str | None,
        typer.Option(
            "--pipeline", metavar="NAME", help="Pipeline to run when FILE defines several."
        ),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            metavar="DIR",
            help="Folder for the run's files (default secureml-runs/<file>-<time>).",
        ),
    ] = None,
    dev_identity: Annotated[
        bool,
        typer.Option(
            "--dev-identity",
            help="Serve a local SPIFFE Workload API (throwaway CA) issuing each step its profile ID.",
        ),
    ] = False,
    simulate_gpu: Annotated[
        bool,
        typer.Option(
            "--simulate-gpu",
            help="Run the GPU stages against the fake CUDA driver and NVML (labelled SIMULATED).",
        ),
    ] = False,
    args: Annotated[
        list[str],
        typer.Option("--arg", metavar="NAME=VALUE", help="Pipeline argument (repeatable)."),
    ] = [],  # noqa: B006 (typer reads the default)
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", help="Show kfp.local's task logs as they run (always in DIR/run.log)."
        ),
    ] = False,
    allow_unverified_images: Annotated[
        bool,
        typer.Option(
            "--allow-unverified-images",
            help="Run although the profile requires signed images: a local run verifies none "
            "(it pulls no image). Without it such a profile is refused.",
        ),
    ] = False,
    output: FormatOption = "text",
) -> None:
    """Compile the pipeline against the profile and run it: locally, every step under the
    launcher (--local), or on a Kubeflow Pipelines server (--host URL), following its steps to the
    end and reading their audit records back.

    Exit 0: every step passed (--host: the run Succeeded). 1: the pipeline does not comply, a step failed, a step was refused at admission, or --timeout passed. 2: unusable input (pipeline file, profile, --arg, --host URL) or environment (a missing machine requirement, a KFP server that cannot be reached or refuses the run).
    """
    if local == (host is not None):
        raise InputError(
            "give one of --local and --host URL",
            why="--local runs on this machine, --host on a Kubeflow Pipelines server",
            fix="add --local, or --host http://localhost:8080 (your KFP endpoint)",
        )
    if host is not None:
        given = [
            flag
            for flag, value in (
                ("--output-dir", output_dir is not None),
                ("--dev-identity", dev_identity),
                ("--simulate-gpu", simulate_gpu),
                ("--verbose", verbose),
                ("--allow-unverified-images", allow_unverified_images),
            )
            if value
        ]
        if given:
            raise InputError(
                f"{', '.join(given)}: only for --local runs",
                fix="drop them: on a KFP server the cluster provides identity, GPUs and logs",
            )
        from secureml.cli.compile import CompileInputs
        from secureml.cli.run_host import HostRun, run_on_host

        run_on_host(
            CompileInputs(
                file,
                profile,
                pipeline,
                bundles,
                fetch_bundles,
                False,
                False,
                require_signed_profile,
                profile_bundle,
                (certificate_identity, certificate_identity_regexp, certificate_oidc_issuer),
                trusted_root,
            ),
            HostRun(host, experiment, run_name, _arguments(args), timeout, poll, output == "json"),
        )
        return
    remote_only = [
        flag
        for flag, value in (
            ("--bundles", bundles is not None),
            ("--fetch-bundles", fetch_bundles),
            ("--require-signed-profile", require_signed_profile),
            ("--profile-bundle", profile_bundle is not None),
            ("--run-name", run_name is not None),
        )
        if value
    ]
    if remote_only:
        raise InputError(
            f"{', '.join(remote_only)}: only for --host runs",
            why="a local run verifies no image and submits nothing",
        )
    from secureml.compile.compiler import CompileError
    from secureml.components.audit_report import render_text
    from secureml.localrun.runner import RunLayout, default_output_dir, run_pipeline_file

    layout = RunLayout(output_dir or default_output_dir(file))
    if output != "json":
        typer.echo(LOCAL_CHECKS)
    try:
        result = run_pipeline_file(
            file,
            profile,
            layout,
            pipeline_name=pipeline,
            arguments=_arguments(args),
            dev_identity=dev_identity,
            simulate_gpu=simulate_gpu,
            verbose=verbose,
            allow_unverified_images=allow_unverified_images,
        )
    except CompileError as err:  # the pipeline breaks the profile: an answer of no, exit 1
        typer.echo(f"error: {err.diagnostics()}", err=True)
        raise typer.Exit(NO) from None
    if output == "json":
        emit_json(_as_json(result))
        raise typer.Exit(0 if result.succeeded else 1)
    typer.echo("")
    typer.echo(f"secureml audit summary: pipeline {result.pipeline}")
    if result.simulated_gpu:
        typer.echo("GPU: SIMULATED (fake libcuda.so.1 / libnvidia-ml.so.1, no real device)")
    typer.echo(render_text(result.summary_records(), simulated_gpu=result.simulated_gpu))
    if result.steps_without_record and result.succeeded:
        # A pipeline that succeeded ran every step it reached: the others were on a dsl.If,
        # dsl.Elif or dsl.Else branch its conditions did not take.
        typer.echo(
            "not run (on a condition branch that was not taken): "
            + ", ".join(result.steps_without_record)
        )
    elif result.steps_without_record:
        typer.echo(
            "no audit record (the step did not run, or its launcher stopped before writing one): "
            + ", ".join(result.steps_without_record)
        )
    typer.echo(f"not checked in this local run: {NOT_CHECKED}")
    typer.echo(
        f"\nrun files: {layout.root} (audit records in {layout.audit_dir}, "
        f"task logs in {layout.log})"
    )
    if not result.succeeded:
        if not verbose:
            from secureml.localrun.runlog import tail

            typer.echo(f"last lines of {layout.log}:", err=True)
            for line in tail(layout.log, 15):
                typer.echo(f"  {line}", err=True)
        failed = result.failed_steps or result.steps_without_record
        at = f" at step(s) {', '.join(failed)}" if failed else ""
        typer.echo(f"error: the pipeline failed{at} (kfp.local: {result.failure})", err=True)
        raise typer.Exit(1)


def _as_json(result: RunResult) -> dict[str, Any]:
    """`run --format json`: the outcome, one summary per audit record, where the files are."""
    from secureml.components.audit_report import summarize

    steps = [
        asdict(summarize(record, simulated_gpu=result.simulated_gpu))
        for record in result.summary_records()
    ]
    return {
        "schema": SCHEMA,
        "pipeline": result.pipeline,
        "succeeded": result.succeeded,
        "failure": result.failure or None,
        "simulatedGpu": result.simulated_gpu,
        "steps": steps,
        "failedSteps": result.failed_steps,
        "stepsWithoutRecord": result.steps_without_record,
        "runDir": str(result.layout.root),
        "auditDir": str(result.layout.audit_dir),
        "log": str(result.layout.log),
    }
