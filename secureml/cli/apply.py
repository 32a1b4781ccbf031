"""`secureml profile apply`: render each tenant's bundle and server-side apply it to a cluster."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from secureml.cli import profile_app, run_cli
from secureml.cli.bundle import (
    ApiServerOption,
    ImagePolicyEngine,
    ImagePolicyOption,
    K8sVersion,
    K8sVersionOption,
    KfpNamespaceOption,
    KubeflowOption,
    bundle_options,
)
from secureml.cli.cluster_options import ContextOption, KubeconfigOption
from secureml.errors import InputError, ProfileError


class DryRun(StrEnum):
    server = "server"


@profile_app.command("apply")
@run_cli
def apply(
    profiles: Annotated[list[Path], typer.Argument(help="TenantProfile YAML files.")],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    dry_run: Annotated[
        DryRun | None,
        typer.Option(
            "--dry-run",
            help="server: the API server validates and admits every object (dryRun=All) and "
            "stores nothing.",
        ),
    ] = None,
    force_conflicts: Annotated[
        bool,
        typer.Option(
            "--force-conflicts",
            help="Take over fields another field manager set to other values (default: refuse "
            "and name that manager).",
        ),
    ] = False,
    type_check_wait: Annotated[
        float,
        typer.Option(
            "--type-check-wait",
            min=0,
            help="Seconds to wait for the server's type checking of each "
            "ValidatingAdmissionPolicy (status.typeChecking).",
        ),
    ] = 10.0,
    k8s_version: K8sVersionOption = K8sVersion.v1_36,
    image_policy: ImagePolicyOption = ImagePolicyEngine.policy_controller,
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
) -> None:
    """Apply each tenant's bundle to a cluster with server-side apply (field manager secureml).

    Nothing is written unless the cluster serves every kind of the bundle: the CRDs of SPIRE's controller manager, Sigstore's policy-controller or Kyverno, the Prometheus Operator and Kubeflow, and the MutatingAdmissionPolicy API (GA from Kubernetes 1.36; on 1.34/1.35 only with kube-apiserver's MutatingAdmissionPolicy feature gate and --runtime-config=admissionregistration.k8s.io/v1beta1=true). Conflicts with another field manager are refused unless --force-conflicts. Afterwards the server's type-checking warnings of each ValidatingAdmissionPolicy are printed.

    Exit 0: applied, no warning. 1: the server refused an object, or type checking warned. 2: unusable profile or kubeconfig, unreachable cluster, or a missing CRD/API.
    """
    from secureml.bundle import render_objects
    from secureml.cluster import apply_bundle, connect
    from secureml.profile import load_profile

    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    try:
        loaded = [load_profile(path) for path in profiles]
    except ProfileError as err:
        raise InputError(err.what, fix=err.fix) from None
    cluster = connect(kubeconfig, context)
    warned = False
    for profile in loaded:
        result = apply_bundle(
            render_objects(profile, options),
            dry_run=dry_run is not None,
            force_conflicts=force_conflicts,
            cluster=cluster,
            typecheck_timeout_s=type_check_wait,
        )
        suffix = " (dry run)" if result.dry_run else ""
        typer.echo(f"tenant {profile.metadata.name} -> {cluster.server}{suffix}")
        for obj in result.objects:
            typer.echo(f"  {obj.outcome:10} {obj.ref}")
        for note in result.notes:
            typer.echo(f"  note: {note}")
        for warning in result.warnings:
            typer.echo(f"  warning: {warning}")
        warned = warned or bool(result.warnings)
    if warned:
        raise typer.Exit(1)
