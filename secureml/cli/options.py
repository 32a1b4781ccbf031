"""Options more than one command takes, declared once so their names, metavars and help agree.

Only typer and the standard library are imported here: `secureml --help` loads this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from secureml.core.k8s_versions import K8sVersion

OutputFormat = Literal["text", "json"]

FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        help="text for people, json for programs (one document on stdout, schema in docs/cli.md).",
    ),
]
K8sVersionOption = Annotated[
    K8sVersion,
    typer.Option(
        "--k8s-version",
        help="Kubernetes version of the cluster (Pod Security revision, API versions).",
    ),
]

# --- talking to a cluster (`profile apply`, `check-pod --server`) -------------------------------
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's "
        "in-cluster service account).",
    ),
]
ContextOption = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="NAME",
        help="Kubeconfig context to use (default: its current context).",
    ),
]

# --- rendering a tenant bundle (`profile render`, `diff`, `apply`) ------------------------------
ImagePolicy = Literal["policy-controller", "kyverno"]
ImagePolicyOption = Annotated[
    ImagePolicy,
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
    str,
    typer.Option(
        "--kfp-namespace",
        metavar="NS",
        help="Namespace of the KFP API server and object store.",
    ),
]
ApiServerOption = Annotated[
    list[str] | None,
    typer.Option(
        "--api-server-cidr",
        metavar="CIDR",
        help="API server address range step pods may reach (Argo's executor reports to it); "
        "repeatable.",
    ),
]

# --- trusting signers (`compile --require-signed-profile`, `verify-*`, `profile verify`) -------
IdentityOption = Annotated[
    str | None,
    typer.Option(
        "--certificate-identity",
        metavar="SAN",
        help="Exact signer identity (certificate SAN).",
    ),
]
IdentityRegexpOption = Annotated[
    str | None,
    typer.Option(
        "--certificate-identity-regexp",
        metavar="REGEX",
        help="Regular expression over the signer identity (re.search).",
    ),
]
IssuerOption = Annotated[
    str | None,
    typer.Option(
        "--certificate-oidc-issuer",
        metavar="URL",
        help="Exact OIDC issuer of the signing certificate.",
    ),
]
TrustedRootOption = Annotated[
    str | None,
    typer.Option(
        "--trusted-root",
        metavar="ROOT",
        help="production | staging | path to a trusted_root.json (default production).",
    ),
]
OnlineOption = Annotated[
    bool,
    typer.Option(
        "--online",
        help="Refresh the production/staging root through TUF instead of the shipped copy.",
    ),
]
TufUrlOption = Annotated[
    str | None,
    typer.Option(
        "--tuf-url",
        metavar="URL",
        help="Take the trusted root from this TUF repository, refreshed now (needs --tuf-root unless public).",
    ),
]
TufRootOption = Annotated[
    Path | None,
    typer.Option(
        "--tuf-root",
        metavar="ROOT_JSON",
        help="The TUF repository's initial root.json, trusted first (with --tuf-url).",
    ),
]
