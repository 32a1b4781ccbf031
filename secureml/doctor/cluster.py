"""`secureml doctor cluster`: is this cluster ready for secureml's tenants, and are their bundles
on it as `profile render` writes them. Only reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from secureml.bundle.common import BundleOptions
from secureml.cluster.requirements import server_minor
from secureml.core import contract
from secureml.core.errors import InputError
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8S_VERSIONS, K8sVersion
from secureml.doctor.check import Check, Report
from secureml.doctor.cluster_components import Needs, component_checks
from secureml.doctor.cluster_read import Reader
from secureml.doctor.cluster_tenant import read_tenant, tenant_checks

if TYPE_CHECKING:
    from secureml.cluster.connection import Cluster
    from secureml.profile.model import TenantProfile

SCHEMA = "secureml.dev/doctor-cluster/v1"
PROFILE_SUFFIXES = (".yaml", ".yml")


def profile_files(paths: Sequence[Path]) -> list[Path]:
    """The profile files of `--profiles`: each file as given, each folder's *.yaml/*.yml sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in PROFILE_SUFFIXES)
            if not found:
                raise InputError(
                    f"{path}: no *.yaml profile in the folder",
                    fix="give the folder of the tenant profiles, or the profile files",
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or folder", fix="give profile files or folders")
    return files


def render_version(git_version: str, chosen: K8sVersion | None) -> K8sVersion:
    """The version to render for: `--k8s-version`, else the server's when secureml supports it."""
    if chosen is not None:
        return chosen
    minor = server_minor(git_version)
    return next((v for v in K8S_VERSIONS if v == minor), DEFAULT_K8S_VERSION)


def version_check(git_version: str, rendered_for: K8sVersion) -> Check:
    name, title = "cluster.version", "Kubernetes version"
    minor = server_minor(git_version)
    if minor not in K8S_VERSIONS:
        return Check(
            name,
            title,
            "warn",
            f"server {git_version}; secureml renders for {', '.join(K8S_VERSIONS)}; bundles "
            f"checked as rendered for {rendered_for}",
            f"run a supported Kubernetes version ({', '.join(K8S_VERSIONS)}), or give the "
            "--k8s-version the bundles were applied with",
        )
    if minor != rendered_for:
        return Check(
            name,
            title,
            "warn",
            f"server {git_version}, bundles checked as rendered for {rendered_for}: their Pod "
            "Security version pin and API versions are not the server's",
            f"render and apply for the server's version (--k8s-version {minor})",
        )
    return Check(name, title, "pass", f"server {git_version}, bundles rendered for {rendered_for}")


def unchecked_tenants_check(reader: Reader) -> Check:
    """Without `--profiles`: the namespaces that carry a tenant label, so their profiles can be given."""
    name, title = "tenants", "tenant bundles checked"
    namespaces = reader.items("v1", "Namespace", {"labelSelector": contract.LABEL_TENANT}) or []
    tenants = sorted(
        f"{ns['metadata']['labels'][contract.LABEL_TENANT]} (namespace {ns['metadata']['name']})"
        for ns in namespaces
    )
    seen = "no --profiles given: no tenant bundle was compared with its render"
    if tenants:
        seen += f"; tenants on the cluster: {', '.join(tenants)}"
    return Check(
        name, title, "warn", seen, "give the tenant profiles: --profiles FILE|DIR (repeatable)"
    )


def cluster_report(
    cluster: Cluster,
    tenants: Sequence[tuple[Path, TenantProfile]],
    options: BundleOptions,
    git_version: str,
) -> Report:
    """Every check of `secureml doctor cluster` in order: the server's version
    against the bundles' version, each tenant's bundle (`cluster_tenant`), then the components
    the controls rely on (`cluster_components`)."""
    from secureml.bundle import render_objects

    reader = Reader(cluster)
    report = Report(subject=f"cluster {cluster.server}")
    report.add(version_check(git_version, options.k8s_version))
    needs = Needs(known=bool(tenants), image_policy=options.image_policy)
    for path, profile in tenants:
        objects = render_objects(profile, options)
        report.add(
            tenant_checks(reader, read_tenant(reader, path, profile, objects, options), git_version)
        )
        classes = sorted(
            {
                request["exactly"]["deviceClassName"]
                for obj in objects
                if obj["kind"] == "ResourceClaimTemplate"
                for request in obj["spec"]["spec"]["devices"]["requests"]
            }
        )
        needs.add(profile, classes)
    if not tenants:
        report.add(unchecked_tenants_check(reader))
    report.add(component_checks(reader, needs))
    return report


def diagnose_cluster(
    kubeconfig: Path | None,
    context: str | None,
    profiles: Sequence[Path],
    options: BundleOptions,
    k8s_version: K8sVersion | None,
) -> tuple[Report, dict[str, Any], str]:
    """`secureml doctor cluster`: the report, its JSON document and its text."""
    from dataclasses import replace

    from secureml.cluster import connect
    from secureml.profile.cross_checks import refuse_shared_namespaces
    from secureml.profile.model import load_profile

    files = profile_files(profiles)
    loaded = [(path, load_profile(path)) for path in files]
    refuse_shared_namespaces(loaded)
    cluster = connect(kubeconfig, context)
    git_version = cluster.version()
    options = replace(options, k8s_version=render_version(git_version, k8s_version))
    report = cluster_report(cluster, loaded, options, git_version)
    text = report_text(report, f"{cluster.server} ({git_version}, {cluster.source})")
    return report, to_json(report, cluster, git_version, options), text


def to_json(
    report: Report, cluster: Cluster, git_version: str, options: BundleOptions
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "server": cluster.server,
        "serverVersion": git_version,
        "renderedFor": options.k8s_version,
        "imagePolicy": options.image_policy,
        **report.to_json(),
    }


def report_text(report: Report, where: str) -> str:
    """One block per check: status and title, then what was seen and the fix, indented."""
    lines = [f"doctor cluster: {where}"]
    for check in report.checks:
        lines.append(f"{check.status:4}  {check.name}: {check.title}")
        for label, text in (("seen", check.seen), ("fix", check.fix)):
            if text:
                first, *rest = text.splitlines()
                lines.append(f"      {label + ':':5} {first}")
                lines.extend(f"            {line}" for line in rest)
    counts = report.counts()
    lines.append(f"{counts['fail']} failed, {counts['warn']} warning(s), {counts['pass']} passed")
    return "\n".join(lines)
