"""`secureml profile ...`: a platform team's commands, in the order they are used: write a profile
from its schema, validate it, render its bundle, diff a change, apply it, verify a signed one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from secureml.cli.options import (
    ApiServerOption,
    ContextOption,
    FormatOption,
    IdentityOption,
    IdentityRegexpOption,
    ImagePolicy,
    ImagePolicyOption,
    IssuerOption,
    K8sVersionOption,
    KfpNamespaceOption,
    KubeconfigOption,
    KubeflowOption,
    OnlineOption,
    TrustedRootOption,
    TufRootOption,
    TufUrlOption,
)
from secureml.cli.output import UNUSABLE, emit_json, run_cli
from secureml.core.errors import ProfileError, SecuremlError
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion

if TYPE_CHECKING:
    from secureml.bundle import BundleOptions

VALIDATE_SCHEMA = "secureml.dev/profile-validate/v1"
DIFF_SCHEMA = "secureml.dev/profile-diff/v1"

ProfilesArgument = Annotated[
    list[Path], typer.Argument(metavar="PROFILE", help="TenantProfile YAML files.")
]

app = typer.Typer(
    name="profile",
    help="Tenant profiles: schema, validate, explain, render, diff, apply, verify.",
    no_args_is_help=True,
)


def bundle_options(
    k8s_version: K8sVersion,
    image_policy: ImagePolicy,
    kubeflow_profile: bool,
    kfp_namespace: str,
    api_server_cidr: list[str] | None,
) -> BundleOptions:
    from secureml.bundle import BundleOptions

    return BundleOptions(
        k8s_version=k8s_version,
        image_policy=image_policy,
        kubeflow_profile=kubeflow_profile,
        kfp_namespace=kfp_namespace,
        api_server_cidrs=tuple(api_server_cidr or ()),
    )


@app.command("schema", short_help="Print the TenantProfile JSON Schema.")
def schema() -> None:
    """Print the TenantProfile JSON Schema (for editors and CI).

    Exit 0 always.
    """
    from secureml.profile.model import profile_json_schema

    typer.echo(json.dumps(profile_json_schema(), indent=2, sort_keys=True))


@app.command("validate", short_help="Check profiles: every problem, with line and column.")
@run_cli
def validate(files: ProfilesArgument, output: FormatOption = "text") -> None:
    """Check tenant profiles: one line per problem (file:line:column: field: message).

    Exit 0: every profile is valid. 2: a profile is unusable (invalid, unreadable, not YAML).
    """
    from secureml.profile import runtime_image
    from secureml.profile.cross_checks import shared_namespaces
    from secureml.profile.model import load_profile
    from secureml.profile.network import egress_warnings
    from secureml.profile.quota import quota_warnings

    results: list[dict[str, Any]] = []
    valid: list[tuple[Path, Any]] = []
    for path in files:
        entry: dict[str, Any] = {"file": str(path), "valid": False, "problems": [], "warnings": []}
        try:
            profile = load_profile(path)
        except ProfileError as err:
            entry["problems"] = [
                {"where": err.where_of(field), "field": field, "message": message}
                for field, message in err.problems
            ]
        except SecuremlError as err:
            entry["problems"] = [{"where": str(path), "field": "", "message": err.what}]
            entry["error"] = err.diagnostics()
        else:
            entry.update(valid=True, tenant=profile.metadata.name, tier=profile.spec.tier)
            entry["warnings"] = [
                *egress_warnings(profile.spec.network.egress, profile.spec.tier),
                *runtime_image.warnings(profile),
                *quota_warnings(profile),
            ]
            valid.append((path, profile))
        results.append(entry)
    shared = shared_namespaces(valid)
    if output == "json":
        emit_json({"schema": VALIDATE_SCHEMA, "profiles": results, "warnings": shared})
    else:
        for entry in results:
            if entry["valid"]:
                typer.echo(f"{entry['file']}: ok (tenant {entry['tenant']}, tier {entry['tier']})")
                for warning in entry["warnings"]:
                    typer.echo(f"{entry['file']}: warning: {warning}")
            elif "error" in entry:
                typer.echo(entry["error"].replace("\n", " "))
            else:
                for problem in entry["problems"]:
                    typer.echo(f"{problem['where']}: {problem['field']}: {problem['message']}")
        for warning in shared:
            typer.echo(f"warning: {warning}")
    if not all(entry["valid"] for entry in results):
        raise typer.Exit(UNUSABLE)


@app.command("explain", short_help="What a profile's bundle allows, requires and refuses.")
@run_cli
def explain(
    profile_file: Annotated[Path, typer.Argument(metavar="PROFILE", help="A TenantProfile.")],
    k8s_version: K8sVersionOption = DEFAULT_K8S_VERSION,
    output: Annotated[
        Literal["text", "markdown", "json"],
        typer.Option(
            "--format",
            help="text for people, markdown for a review, json for programs (schema in "
            "docs/cli.md).",
        ),
    ] = "text",
) -> None:
    """Summarise what the tenant's bundle enforces: per GPU pool what a step may ask for (or why
    the pool is refused) and the rules that hold it there, what every step is required to do, and
    every admission rule by id.

    Exit 0: explained. 2: an unusable profile.
    """
    from secureml.bundle.explain import as_markdown, as_text
    from secureml.bundle.explain import explain as explained
    from secureml.profile.model import load_profile

    data = explained(load_profile(profile_file), k8s_version)
    if output == "json":
        emit_json({**data, "file": str(profile_file)})
    else:
        typer.echo(as_markdown(data) if output == "markdown" else as_text(data), nl=False)


@app.command("render", short_help="Write each tenant's bundle as a kustomize folder.")
@run_cli
def render(
    profiles: ProfilesArgument,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", metavar="DIR", help="Folder; each tenant gets DIR/<tenant>/."
        ),
    ],
    k8s_version: K8sVersionOption = DEFAULT_K8S_VERSION,
    image_policy: ImagePolicyOption = "policy-controller",
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
) -> None:
    """Write each tenant's kustomize folder of cluster objects (apply with `kubectl apply -k`).

    Exit 0: written. 2: an unusable profile or output folder.
    """
    from secureml.bundle import write_bundle
    from secureml.core.output_paths import check_output_folder
    from secureml.profile import runtime_image
    from secureml.profile.cross_checks import refuse_shared_namespaces
    from secureml.profile.model import load_profile

    check_output_folder(output, "-o")
    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    loaded = [load_profile(path) for path in profiles]
    refuse_shared_namespaces(list(zip(profiles, loaded, strict=True)))
    for profile in loaded:
        folder = write_bundle(profile, output, options)
        typer.echo(f"{folder}: tenant {profile.metadata.name} (kubectl apply -k {folder})")
        for warning in runtime_image.warnings(profile):
            typer.echo(f"warning: tenant {profile.metadata.name}: {warning}", err=True)


@app.command("diff", short_help="What a profile change does to the bundle.")
@run_cli
def diff(
    old: Annotated[Path, typer.Argument(metavar="OLD", help="The TenantProfile as it is now.")],
    new: Annotated[Path, typer.Argument(metavar="NEW", help="The changed TenantProfile.")],
    k8s_version: K8sVersionOption = DEFAULT_K8S_VERSION,
    image_policy: ImagePolicyOption = "policy-controller",
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
    output: FormatOption = "text",
    unified: Annotated[
        bool,
        typer.Option("--unified", help="Print the unified diff of the rendered YAML instead."),
    ] = False,
) -> None:
    """Show what a profile change does to the tenant bundle: the profile fields that changed, the
    admission rules added, removed or allowing something else (old and new wording, by rule id),
    and the other bundle objects that changed, field by field. `--unified` prints the unified diff
    of the rendered files instead.

    Exit 0: no change to the bundle. 1: the bundle changes. 2: an unusable profile.
    """
    from secureml.bundle import bundle_diff
    from secureml.bundle.diff import bundle_changes, changes_text
    from secureml.profile.model import load_profile

    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    before, after = load_profile(old), load_profile(new)
    text = bundle_diff(before, after, options)
    if output == "json":
        emit_json(
            {
                "schema": DIFF_SCHEMA,
                "old": str(old),
                "new": str(new),
                "changed": bool(text),
                "diff": text,
                **bundle_changes(before, after, options),
            }
        )
    elif not text:
        typer.echo("no change to the bundle")
    elif unified:
        typer.echo(text, nl=False)
    else:
        changes = bundle_changes(before, after, options)
        typer.echo(changes_text(changes), nl=False)
    if text:
        raise typer.Exit(1)


@app.command("apply", short_help="Server-side apply each tenant's bundle to a cluster.")
@run_cli
def apply(
    profiles: ProfilesArgument,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    dry_run: Annotated[
        Literal["server"] | None,
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
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Also delete the tenant's bundle objects (by the bundle's labels) that the "
            "current render no longer has, e.g. a NetworkPolicy removed from the profile; with "
            "--dry-run, list them. Namespaces are never deleted.",
        ),
    ] = False,
    type_check_wait: Annotated[
        float,
        typer.Option(
            "--type-check-wait",
            metavar="SECONDS",
            min=0,
            help="Seconds to wait for the server's type checking of each "
            "ValidatingAdmissionPolicy (status.typeChecking).",
        ),
    ] = 10.0,
    k8s_version: K8sVersionOption = DEFAULT_K8S_VERSION,
    image_policy: ImagePolicyOption = "policy-controller",
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
) -> None:
    """Apply each tenant's bundle to a cluster with server-side apply (field manager secureml).

    Nothing is written unless the cluster serves every kind of the bundle: the CRDs of SPIRE's controller manager, Sigstore's policy-controller or Kyverno, the Prometheus Operator and Kubeflow, and the MutatingAdmissionPolicy API (GA from Kubernetes 1.36; on 1.34/1.35 only with kube-apiserver's MutatingAdmissionPolicy feature gate and `--runtime-config=admissionregistration.k8s.io/v1beta1=true`). Conflicts with another field manager are refused unless --force-conflicts. Afterwards the server's type-checking warnings of each ValidatingAdmissionPolicy are printed.

    Exit 0: applied, no warning. 1: the server refused an object, or type checking warned. 2: unusable profile or kubeconfig, unreachable cluster, or a missing CRD/API.
    """
    from secureml.bundle import render_objects
    from secureml.cluster import apply_bundle, connect
    from secureml.cluster.prune import delete_objects, stale_objects
    from secureml.cluster.refusal import object_ref
    from secureml.profile.cross_checks import refuse_shared_namespaces
    from secureml.profile.model import load_profile

    options = bundle_options(
        k8s_version, image_policy, kubeflow_profile, kfp_namespace, api_server_cidr
    )
    loaded = [load_profile(path) for path in profiles]
    refuse_shared_namespaces(list(zip(profiles, loaded, strict=True)))
    cluster = connect(kubeconfig, context)
    warned = False
    for profile in loaded:
        rendered = render_objects(profile, options)
        result = apply_bundle(
            rendered,
            dry_run=dry_run is not None,
            force_conflicts=force_conflicts,
            cluster=cluster,
            typecheck_timeout_s=type_check_wait,
        )
        suffix = " (dry run)" if result.dry_run else ""
        typer.echo(f"tenant {profile.metadata.name} -> {cluster.server}{suffix}")
        for obj in result.objects:
            typer.echo(f"  {obj.outcome:10} {obj.ref}")
        if prune:
            stale = stale_objects(cluster, profile.metadata.name, rendered)
            if not result.dry_run:
                delete_objects(cluster, stale)
            verb = "would delete" if result.dry_run else "deleted"
            for gone in stale:
                typer.echo(f"  {verb:10} {object_ref(gone)}")
        for note in result.notes:
            typer.echo(f"  note: {note}")
        for warning in result.warnings:
            typer.echo(f"  warning: {warning}")
        warned = warned or bool(result.warnings)
    if warned:
        raise typer.Exit(1)


@app.command("verify", short_help="Check a profile against its Sigstore signature.")
@run_cli
def verify(
    profile: Annotated[
        Path,
        typer.Argument(metavar="PROFILE", help="The TenantProfile file, byte for byte as signed."),
    ],
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle", metavar="FILE", help="Its bundle (default PROFILE.sigstore.json)."
        ),
    ] = None,
    certificate_identity: IdentityOption = None,
    certificate_identity_regexp: IdentityRegexpOption = None,
    certificate_oidc_issuer: IssuerOption = None,
    trusted_root: TrustedRootOption = None,
    online: OnlineOption = False,
    tuf_url: TufUrlOption = None,
    tuf_root: TufRootOption = None,
    output: FormatOption = "text",
) -> None:
    """Check that a profile is exactly the one its platform team signed.

    Exit 0: verified. 1: no bundle, a bundle that does not verify, or an untrusted signer. 2: unusable flags or files, or an unreachable trust root.
    """
    from secureml.cli.verify import describe, identities_from, tuf_from
    from secureml.supplychain.profiles import verify_signed_profile
    from secureml.supplychain.verifier import SignatureVerifier

    identities = identities_from(
        certificate_identity, certificate_identity_regexp, certificate_oidc_issuer
    )
    tuf = tuf_from(tuf_url, tuf_root, trusted_root)
    verifier = SignatureVerifier(trusted_root or "production", online=online, tuf=tuf)
    signed = verify_signed_profile(
        profile, bundle, identities, verifier=verifier, bundle_flag="--bundle"
    )
    if output == "json":
        from secureml.cli.verify import verified_json
        from secureml.supplychain.profiles import default_profile_bundle

        emit_json(
            verified_json(str(profile), signed, str(bundle or default_profile_bundle(profile)))
        )
    else:
        typer.echo(f"verified: profile {profile} {describe(signed)}")
