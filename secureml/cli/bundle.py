"""`secureml profile render` and `secureml profile diff`: the tenant bundle from the command line."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from secureml.cli import profile_app, run_cli

if TYPE_CHECKING:
    from secureml.bundle import BundleOptions


class K8sVersion(StrEnum):
    v1_34 = "1.34"
    v1_35 = "1.35"
    v1_36 = "1.36"
    v1_37 = "1.37"


class ImagePolicyEngine(StrEnum):
    policy_controller = "policy-controller"
    kyverno = "kyverno"


K8sVersionOption = Annotated[
    K8sVersion,
    typer.Option(
        "--k8s-version", help="Kubernetes version the bundle targets (PSA pin, API versions)."
    ),
]
ImagePolicyOption = Annotated[
    ImagePolicyEngine,
    typer.Option("--image-policy", help="Image signature policy engine installed in the cluster."),
]
KubeflowOption = Annotated[
    bool,
    typer.Option(
        "--kubeflow-profile/--no-kubeflow-profile",
        help="Render a Kubeflow Profile (default) or a plain ResourceQuota for the GPU quota.",
    ),
]
KfpNamespaceOption = Annotated[
    str, typer.Option("--kfp-namespace", help="Namespace of the KFP API server and object store.")
]
ApiServerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-server-cidr",
        help="API server address range step pods may reach (Argo's executor reports to it); repeatable.",
    ),
]


def bundle_options(
    k8s_version: K8sVersion,
    image_policy: ImagePolicyEngine,
    kubeflow_profile: bool,
    kfp_namespace: str,
    api_server_cidr: list[str] | None,
) -> BundleOptions:
    from secureml.bundle import BundleOptions

    return BundleOptions(
        k8s_version=k8s_version.value,
        image_policy=image_policy.value,
        kubeflow_profile=kubeflow_profile,
        kfp_namespace=kfp_namespace,
        api_server_cidrs=tuple(api_server_cidr or ()),
    )


@profile_app.command("render")
@run_cli
def render(
    profiles: Annotated[list[Path], typer.Argument(help="TenantProfile YAML files.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Folder; each tenant gets DIR/<tenant>/.")
    ],
    k8s_version: K8sVersionOption = K8sVersion.v1_36,
    image_policy: ImagePolicyOption = ImagePolicyEngine.policy_controller,
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
) -> None:
    """Write each tenant's kustomize folder of cluster objects (apply with `kubectl apply -k`)."""
    from secureml.bundle import write_bundle
    from secureml.profile import load_profile

    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    loaded = [load_profile(path) for path in profiles]
    for profile in loaded:
        folder = write_bundle(profile, output, options)
        typer.echo(f"{folder}: tenant {profile.metadata.name} (kubectl apply -k {folder})")


@profile_app.command("diff")
@run_cli
def diff(
    old: Annotated[Path, typer.Argument(help="The TenantProfile as it is now.")],
    new: Annotated[Path, typer.Argument(help="The changed TenantProfile.")],
    k8s_version: K8sVersionOption = K8sVersion.v1_36,
    image_policy: ImagePolicyOption = ImagePolicyEngine.policy_controller,
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
) -> None:
    """Show what a profile change does to the bundle. Exit 0: no change, 1: changes, 2: bad input."""
    from secureml.bundle import bundle_diff
    from secureml.errors import ProfileError
    from secureml.profile import load_profile

    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    try:
        before, after = load_profile(old), load_profile(new)
    except ProfileError as err:  # exit 1 means "the bundle changes" here: bad input is 2
        print(f"error: {err.diagnostics()}", file=sys.stderr)
        raise typer.Exit(2) from None
    text = bundle_diff(before, after, options)
    if text:
        typer.echo(text, nl=False)
        raise typer.Exit(1)
    typer.echo("no change to the bundle")
