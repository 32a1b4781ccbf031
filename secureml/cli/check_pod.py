"""`secureml check-pod`: what the cluster's admission rules would say about pods, offline."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from secureml.cli import app, run_cli
from secureml.cli.bundle import K8sVersion
from secureml.errors import InputError, ProfileError


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
) -> None:
    """Judge pods against a tenant profile or a Pod Security level.

    Exit 0 when every pod is allowed, 1 when any is denied, 2 when the input cannot be used.
    """
    from secureml.rules import evaluate, rules_for_level, rules_for_profile
    from secureml.workloads import read_pods

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

    results = []
    for pod in read_pods(files):
        violations = evaluate(pod.pod, rules)
        results.append(
            {
                "kind": pod.kind,
                "name": pod.name,
                "namespace": pod.namespace,
                "file": pod.file,
                "doc_index": pod.doc_index,
                "verdict": "denied" if violations else "allowed",
                "violations": [{"rule": v.rule_id, "message": v.message} for v in violations],
            }
        )
    denied = sum(1 for result in results if result["verdict"] == "denied")
    if output is OutputFormat.json:
        report = {
            "policy": policy,
            "rules": [rule.id for rule in rules],
            "objects": results,
            "summary": {
                "objects": len(results),
                "allowed": len(results) - denied,
                "denied": denied,
            },
        }
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(_table(results, denied))
    if denied:
        raise typer.Exit(1)


def _table(results: list[dict[str, Any]], denied: int) -> str:
    lines = []
    for result in results:
        where = f"{result['file']}#{result['doc_index']}"
        head = f"{result['verdict'].upper():8} {result['kind']}/{result['name']}  ({where})"
        lines.append(head)
        for violation in result["violations"]:
            lines.append(f"    {violation['rule']}: {violation['message']}")
    lines.append(f"{len(results)} object(s): {len(results) - denied} allowed, {denied} denied")
    return "\n".join(lines)
