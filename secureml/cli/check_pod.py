"""`secureml check-pod`: parse the options, call `secureml.admission.check_pod`, print its report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from secureml.cli.options import (
    ContextOption,
    FormatOption,
    K8sVersionOption,
    KubeconfigOption,
    OutputFormat,
)
from secureml.cli.output import emit_json, print_table, run_cli
from secureml.core.errors import InputError
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION

if TYPE_CHECKING:
    from secureml.admission.check_pod import PodCheckReport


@run_cli
def check_pod(
    files: Annotated[
        list[str],
        typer.Argument(
            metavar="FILE",
            help="YAML files of Pods or workloads (multi-document; '-' is stdin).",
        ),
    ],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            metavar="FILE",
            help="TenantProfile: Pod Security restricted + its secureml rules.",
        ),
    ] = None,
    level: Annotated[
        Literal["baseline", "restricted"] | None,
        typer.Option("--level", help="Pod Security Standard to apply."),
    ] = None,
    k8s_version: K8sVersionOption = DEFAULT_K8S_VERSION,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--rule",
            metavar="ID",
            help="Apply only this rule id (repeatable), e.g. pss.hostPorts.",
        ),
    ] = None,
    mutated: Annotated[
        bool,
        typer.Option(
            "--mutated",
            help="The pods already went through the tenant's mutating policy (read back from a "
            "cluster): do not apply it again.",
        ),
    ] = False,
    before: Annotated[
        list[str] | None,
        typer.Option(
            "--before",
            metavar="FILE",
            help="Judge the pods as UPDATEs of the pods of the same name in FILE (repeatable): "
            "the rules that compare with oldObject, e.g. secureml.platformMetadataImmutable.",
        ),
    ] = None,
    server: Annotated[
        bool,
        typer.Option(
            "--server",
            help="Ask the cluster's API server instead: a dry-run create of each pod in the "
            "tenant namespace (nothing is stored).",
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NS",
            help="With --server: the namespace to create the pods in (default: each pod's own, "
            "then the kubeconfig context's, then default).",
        ),
    ] = None,
    as_user: Annotated[
        str | None,
        typer.Option(
            "--as",
            metavar="USER",
            help="With --server: create the pods as USER (impersonation, as kubectl --as), e.g. "
            "the pipeline runner system:serviceaccount:kubeflow:argo: a pod with pipeline labels "
            "that you create yourself is refused (secureml.pipelineIdentity).",
        ),
    ] = None,
    as_group: Annotated[
        str | None,
        typer.Option("--as-group", metavar="GROUP", help="With --as: the group to act in."),
    ] = None,
    output: FormatOption = "text",
) -> None:
    """Judge pods against a tenant profile or a Pod Security level, or by a real API server.

    Offline (--profile or --level) the rules are evaluated here by the same CEL the tenant bundle's ValidatingAdmissionPolicies run, on the pod those policies would see: the Pod API's defaults (a volume without a source is an emptyDir, schedulerName default-scheduler), then on a CREATE the profile's mutating policy (not with --mutated); a pod that the mutation makes invalid (a platform volume, mount or container name it already uses) is denied as k8s.validation, as the server does. With --server each pod goes through the cluster's whole admission chain as a dry-run create (dryRun=All) in the tenant namespace: the bundle's MutatingAdmissionPolicy, Pod Security, the ValidatingAdmissionPolicies, LimitRanger, ResourceQuota; a denial is reported with the rule id its message carries (k8s.* where the server's own checks refused).

    Exit 0: every pod is allowed. 1: a pod is denied. 2: unusable input (files, flags, profile) or a cluster that cannot be reached.
    """
    if server:
        if profile is not None or level is not None or only or mutated or before:
            raise InputError(
                "--server judges pods by the cluster's own policies: --profile, --level, "
                "--rule, --mutated and --before do not apply",
                fix="give --namespace for the tenant namespace, or drop --server",
            )
        from secureml.admission.check_pod import ServerTarget, check_on_server

        target = ServerTarget(kubeconfig, context, namespace, as_user, as_group)
        report = check_on_server(files, target)
    else:
        if any(v is not None for v in (namespace, kubeconfig, context, as_user, as_group)):
            raise InputError(
                "--namespace, --kubeconfig, --context, --as and --as-group need --server",
                fix="add --server to ask the cluster, or drop them",
            )
        from secureml.admission.check_pod import OfflinePolicy, check_offline

        policy = OfflinePolicy(
            profile, level, k8s_version, tuple(only or ()), mutated, tuple(before or ())
        )
        report = check_offline(files, policy)
    _print(report, output)
    raise typer.Exit(report.exit_code)


def _print(report: PodCheckReport, output: OutputFormat) -> None:
    if output == "json":
        emit_json(report.to_json())
        return
    print_table(
        ["VERDICT", "OBJECT", "SOURCE", "VIOLATIONS"],
        (
            [
                v.verdict.upper(),
                f"{v.pod.kind}/{v.pod.name}",
                f"{v.pod.file}#{v.pod.doc_index}",
                "\n".join(v.rule_ids) or "-",
            ]
            for v in report.verdicts
        ),
    )
    for v in report.verdicts:
        for finding in v.findings:
            typer.echo(f"{v.pod.kind}/{v.pod.name}: {finding.rule}: {finding.what}")
            requirement = report.requirements.get(finding.rule)
            if requirement:
                typer.echo(f"  fix: meet {finding.rule}: {requirement}")
    for note in report.notes:
        typer.echo(f"note: {note}")
    counts = report.summary()
    typer.echo(
        f"{counts['objects']} object(s): {counts['allowed']} allowed, {counts['denied']} denied"
    )
