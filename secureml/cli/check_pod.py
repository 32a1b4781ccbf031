"""`secureml check-pod`: what the cluster's admission rules say about pods, offline or by the API
server itself (`--server`); both print the same table and JSON (`secureml.verdicts`)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from secureml.cli import app, run_cli
from secureml.cli.bundle import K8sVersion
from secureml.cli.cluster_options import ContextOption, KubeconfigOption
from secureml.errors import InputError, ProfileError

if TYPE_CHECKING:
    from secureml.rules import Rule
    from secureml.verdicts import PodVerdict


class Level(StrEnum):
    baseline = "baseline"
    restricted = "restricted"


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


@app.command("check-pod")
@run_cli
def check_pod(
    files: Annotated[
        list[str],
        typer.Argument(help="YAML files of Pods or workloads (multi-document; '-' reads stdin)."),
    ],
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile", help="TenantProfile: Pod Security restricted + its secureml rules."
        ),
    ] = None,
    level: Annotated[
        Level | None,
        typer.Option("--level", help="Pod Security Standard to apply."),
    ] = None,
    k8s_version: Annotated[
        K8sVersion,
        typer.Option(
            "--k8s-version", help="Kubernetes version whose Pod Security revision applies."
        ),
    ] = K8sVersion.v1_36,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="table or json.")
    ] = OutputFormat.table,
    only: Annotated[
        list[str] | None,
        typer.Option("--rule", help="Apply only this rule id (repeatable), e.g. pss.hostPorts."),
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
            help="With --server: the namespace to create the pods in (default: each pod's own, "
            "then the kubeconfig context's, then default).",
        ),
    ] = None,
) -> None:
    """Judge pods against a tenant profile or a Pod Security level, or by a real API server.

    Offline (--profile or --level) the rules are evaluated here by the same CEL the tenant bundle's ValidatingAdmissionPolicies run. With --server each pod goes through the cluster's whole admission chain as a dry-run create (dryRun=All) in the tenant namespace: the bundle's MutatingAdmissionPolicy, Pod Security, the ValidatingAdmissionPolicies, LimitRanger, ResourceQuota; a denial is reported with the rule id its message carries (k8s.* where the server's own checks refused).

    Exit 0 when every pod is allowed, 1 when any is denied, 2 when the input cannot be used or the cluster cannot be reached.
    """
    from secureml.workloads import read_pods

    if server:
        if profile is not None or level is not None or only:
            raise InputError(
                "--server judges pods by the cluster's own policies: --profile, --level and "
                "--rule do not apply",
                fix="give --namespace for the tenant namespace, or drop --server",
            )
        from secureml.cluster import check_pods_on_server, connect

        pods = read_pods(files)
        cluster = connect(kubeconfig, context)
        verdicts = check_pods_on_server(pods, namespace, cluster=cluster)
        policy: dict[str, Any] = {
            "server": cluster.server,
            "kubeconfig": cluster.source,
            "namespace": namespace,
            "dryRun": "All",
        }
        rule_ids: list[str] = []
    else:
        if namespace is not None or kubeconfig is not None or context is not None:
            raise InputError(
                "--namespace, --kubeconfig and --context need --server",
                fix="add --server to ask the cluster, or drop them",
            )
        from secureml.verdicts import judge_offline

        rules, policy = _offline_rules(profile, level, k8s_version, only)
        verdicts = judge_offline(read_pods(files), rules)
        rule_ids = [rule.id for rule in rules]
    _report(verdicts, policy, rule_ids, output)


def _report(
    verdicts: list[PodVerdict], policy: dict[str, Any], rule_ids: list[str], output: OutputFormat
) -> None:
    from secureml.verdicts import json_report, table

    if output is OutputFormat.json:
        typer.echo(json.dumps(json_report(verdicts, policy, rule_ids), indent=2))
    else:
        typer.echo(table(verdicts))
    if any(verdict.findings for verdict in verdicts):
        raise typer.Exit(1)


def _offline_rules(
    profile: Path | None, level: Level | None, k8s_version: K8sVersion, only: list[str] | None
) -> tuple[list[Rule], dict[str, Any]]:
    """The rules of --profile or --level (narrowed by --rule) and the JSON report's policy."""
    from secureml.rules import rules_for_level, rules_for_profile

    if (profile is None) == (level is None):
        raise InputError(
            "give exactly one of --profile or --level",
            fix="e.g. --profile profiles/team-a.yaml or --level restricted",
        )
    if profile is not None:
        from secureml.profile import load_profile

        try:
            tenant = load_profile(profile)
        except ProfileError as err:
            raise InputError(err.what, fix=err.fix) from None
        rules = rules_for_profile(tenant, k8s_version.value)
        policy = {"profile": tenant.metadata.name, "source": str(profile)}
    else:
        assert level is not None
        rules = rules_for_level(level.value, k8s_version.value)
        policy = {"level": level.value, "kubernetes": k8s_version.value}
    if only:
        known = {rule.id for rule in rules}
        unknown = sorted(set(only) - known)
        if unknown:
            raise InputError(
                f"unknown rule id(s) {', '.join(unknown)} for this policy",
                fix=f"choose among: {', '.join(sorted(known))}",
            )
        rules = [rule for rule in rules if rule.id in only]
    return rules, policy
