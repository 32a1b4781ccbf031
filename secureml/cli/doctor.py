"""`secureml doctor`: is this GPU node, cluster, node log or secured pipeline run healthy."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from secureml.cli.options import (
    ApiServerOption,
    ContextOption,
    FormatOption,
    ImagePolicyOption,
    KfpNamespaceOption,
    KubeconfigOption,
    KubeflowOption,
)
from secureml.cli.output import emit_json, print_table, run_cli
from secureml.core.k8s_versions import DEFAULT_K8S_VERSION, K8sVersion

# A log's findings quote whole log lines: in a pipe their table is wrapped at this width (its JSON,
# --format json, keeps every line whole).
PIPED_WIDTH = 120

app = typer.Typer(
    help="Check a GPU node, a cluster, a node's logs or a pipeline run on your KFP: each check "
    "pass / warn / fail, what was seen, and the fix. Exit 0 when nothing failed, 1 when a check failed, 2 on unusable input.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("logs")
@run_cli
def logs(
    source: Annotated[
        str,
        typer.Argument(
            metavar="FILE|-",
            help="A kernel log (dmesg, journalctl -k, /var/log/kern.log) or a step's log; - reads "
            "standard input.",
        ),
    ],
    audit_dir: Annotated[
        Path | None,
        typer.Option(
            "--audit-dir",
            metavar="DIR",
            help="Audit records to name the tenant and step an Xid's pid belonged to (the log's "
            "own secureml-audit lines are read too).",
        ),
    ] = None,
    output: FormatOption = "text",
) -> None:
    """Classify the GPU driver events in a log: Xids (application, memory, device, NVLink),
    GPUs fallen off the bus, driver/library version mismatches and CUDA errors, each with its
    action (docs/xid.md).

    Exit 0: no event needs action on the node (nothing found, or only the steps' own faults).
    1: an event needs action on the node (memory, device, NVLink, driver mismatch).
    2: the log or the audit folder cannot be read."""
    from secureml.doctor.logs import diagnose_logs

    report, document, title = diagnose_logs(source, audit_dir)
    if output == "json":
        emit_json(document)
    else:
        print_table(
            ("status", "check", "seen", "fix"),
            ((c.status, c.title, c.seen, c.fix) for c in report.checks),
            title=title,
            piped_width=PIPED_WIDTH,
        )
        counts = report.counts()
        typer.echo(
            f"{counts['fail']} need action, {counts['warn']} warning(s), {counts['pass']} pass"
        )
    raise typer.Exit(report.exit_code())


@app.command("cluster")
@run_cli
def cluster(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    profiles: Annotated[
        list[Path] | None,
        typer.Option(
            "--profiles",
            metavar="FILE|DIR",
            help="Tenant profiles whose bundles to compare with the cluster: files, or folders of "
            "*.yaml profiles; repeatable.",
        ),
    ] = None,
    k8s_version: Annotated[
        K8sVersion | None,
        typer.Option(
            "--k8s-version",
            help="Kubernetes version the bundles were rendered for (default: the server's).",
        ),
    ] = None,
    image_policy: ImagePolicyOption = "policy-controller",
    kubeflow_profile: KubeflowOption = True,
    kfp_namespace: KfpNamespaceOption = "kubeflow",
    api_server_cidr: ApiServerOption = None,
    output: FormatOption = "text",
) -> None:
    """Check a cluster for secureml: each tenant's bundle applied and in sync with `profile
    render` (the differing objects as a diff), its policies bound and type-checked clean, its
    namespace's Pod Security labels; the SPIFFE CSI driver, SPIRE, the device plugin and the
    nodes' GPU resource names or the DRA driver, the image policy engine, dcgm-exporter. Give the
    render flags `profile apply` was given. Only reads.

    Exit 0: nothing failed (warnings allowed). 1: a check failed. 2: unusable profiles or
    kubeconfig, or an unreachable cluster."""
    from secureml.cli.profile import bundle_options
    from secureml.doctor.cluster import diagnose_cluster

    options = bundle_options(
        k8s_version or DEFAULT_K8S_VERSION,
        image_policy,
        kubeflow_profile,
        kfp_namespace,
        api_server_cidr,
    )
    report, document, text = diagnose_cluster(
        kubeconfig, context, profiles or [], options, k8s_version
    )
    if output == "json":
        emit_json(document)
    else:
        typer.echo(text)
    raise typer.Exit(report.exit_code())


@app.command("node")
@run_cli
def node(
    profiles: Annotated[
        list[Path] | None,
        typer.Option(
            "--profiles",
            metavar="FILE|DIR",
            help="Tenant profiles whose expectations (MIG profiles, time-sliced resources, "
            "confidential computing) the node must meet: files, or folders of *.yaml; repeatable.",
        ),
    ] = None,
    node_labels: Annotated[
        list[str] | None,
        typer.Option(
            "--node-labels",
            metavar="K=V[,K=V]",
            help="The node's labels, to tell which profiles' pools hold it (repeatable). Without "
            "them and without --node-name every profile applies.",
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(
            "--node-name",
            metavar="NAME",
            help="Read the node's labels from the API server (needs get on nodes); the DaemonSet "
            "passes its spec.nodeName.",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    root: Annotated[
        Path,
        typer.Option(
            "--root",
            metavar="DIR",
            help="Where the host's / is: /proc/driver/nvidia, /sys/module/nvidia and "
            "/etc/nvidia-container-runtime are read under it (the DaemonSet mounts them at /host).",
        ),
    ] = Path("/"),
    toolkit_config: Annotated[
        Path | None,
        typer.Option(
            "--toolkit-config",
            metavar="FILE",
            help="The NVIDIA container toolkit's config.toml (default "
            "ROOT/etc/nvidia-container-runtime/config.toml).",
        ),
    ] = None,
    device_plugin_config: Annotated[
        Path | None,
        typer.Option(
            "--device-plugin-config",
            metavar="FILE",
            help="The device plugin's config file, or the GPU operator's ConfigMap YAML (the entry "
            "the node label nvidia.com/device-plugin.config names): time-slicing replicas, "
            "renameByDefault, resource names against the profiles.",
        ),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval",
            metavar="SECONDS",
            min=1.0,
            help="Check again every SECONDS and never exit (the DaemonSet's mode).",
        ),
    ] = None,
    output: FormatOption = "text",
) -> None:
    """Check this GPU node: kernel module, driver and CUDA versions, NVML, persistence mode, MIG
    mode and instances against the profiles on this node's pool, confidential computing, ECC, row
    remapping, retired pages, the container toolkit's envvar setting and the device plugin's
    time-slicing.

    Exit 0: nothing failed (warnings allowed). 1: a check failed. 2: unusable profiles, labels or
    configuration file, or an API server that cannot be read."""
    from secureml.doctor.cluster import profile_files
    from secureml.doctor.node import (
        NodeInputs,
        node_labels_from_api,
        node_report,
        parse_labels,
        to_json,
    )
    from secureml.profile.model import load_profile

    labels = parse_labels(node_labels) if node_labels else None
    if node_name is not None:
        labels = {**node_labels_from_api(node_name, kubeconfig, context), **(labels or {})}
    loaded = tuple(load_profile(path) for path in profile_files(profiles or []))
    inputs = NodeInputs(root, loaded, labels, device_plugin_config, toolkit_config)
    # With --interval, check again every period and never return (the DaemonSet: one report per
    # period in its log).
    while True:
        report = node_report(inputs)
        if output == "json":
            emit_json(to_json(report, inputs))
        else:
            print_table(
                ("status", "check", "seen", "fix"),
                ((c.status, c.name, c.seen, c.fix) for c in report.checks),
                title=f"doctor node: {inputs.root}",
            )
            counts = report.counts()
            typer.echo(
                f"{counts['fail']} failed, {counts['warn']} warning(s), {counts['pass']} passed"
            )
        if interval is None:
            raise typer.Exit(report.exit_code())
        time.sleep(interval)


@app.command("pipeline")
@run_cli
def pipeline(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            metavar="URL",
            help="The Kubeflow Pipelines endpoint kfp.Client takes (the KFP UI, which also serves "
            "the pods' logs, or the ml-pipeline service).",
        ),
    ],
    profile: Annotated[
        Path,
        typer.Option(
            "--profile", metavar="FILE", help="The tenant profile whose bundle the cluster runs."
        ),
    ],
    image: Annotated[
        str,
        typer.Option(
            "--image",
            metavar="IMAGE@sha256:...",
            help="Step image for the doctor's two steps: digest-pinned, with Python, allowed by "
            "the profile (a step image the tenant already runs).",
        ),
    ],
    bundles: Annotated[
        Path | None,
        typer.Option(
            "--bundles",
            metavar="DIR",
            help="Folder of image Sigstore bundles, as `compile --bundles`.",
        ),
    ] = None,
    fetch_bundles: Annotated[
        bool,
        typer.Option(
            "--fetch-bundles", help="Read the image's bundle from the registry, as `compile`."
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", metavar="SECONDS", min=1.0, help="Stop waiting for the run after SECONDS."
        ),
    ] = 600.0,
    poll: Annotated[
        float,
        typer.Option("--poll", metavar="SECONDS", min=0.01, help="Seconds between two reads."),
    ] = 2.0,
    output: FormatOption = "text",
) -> None:
    """Run a tiny secured pipeline (two CPU steps passing a word) on your own KFP, compiled for
    PROFILE, and check every step: its pod admitted by the bundle, run to Succeeded, its audit
    record read from its log and passed. Leaves the run in the experiment secureml-doctor.

    Exit 0: every step admitted, run and audited (warnings allowed: an audit record the server
    does not give). 1: a check failed (refused at admission, failed, timed out, or the image breaks
    the profile). 2: unusable input (URL, profile, image) or a KFP server that cannot be reached or
    refuses the run."""
    from secureml.cli.compile import CompileInputs, compile_secured
    from secureml.cli.run_host import REQUEST_TIMEOUT, HostRun, follow_run
    from secureml.doctor.check import Check, Report
    from secureml.remoterun import smoke
    from secureml.remoterun.host import Submission, connect

    kfp = connect(host, timeout=min(REQUEST_TIMEOUT, timeout))
    report = Report(f"doctor pipeline: {kfp.url}")
    report.add(
        Check(
            "host",
            "a KFP API server answers",
            "pass",
            f"{kfp.url} ({'multi-user' if kfp.multi_user else 'single-user'})",
        )
    )
    compiled = compile_secured(
        CompileInputs(
            Path(smoke.__file__),
            profile,
            None,
            bundles,
            fetch_bundles,
            False,
            False,
            False,
            None,
            (None, None, None),
            None,
        ),
        smoke.smoke_pipeline(image),
    )
    report.add(smoke.compile_checks(compiled.violations))
    if compiled.result is not None:
        submission = Submission(kfp, compiled.tenant.spec.namespace)
        run_id = submission.create(
            compiled.result.yaml_text,
            run_name=f"{smoke.PIPELINE_NAME} {time.strftime('%Y-%m-%d %H-%M-%S')}",
            experiment=smoke.PIPELINE_NAME,
            arguments={},
        )
        report.add(
            Check(
                "submit",
                "the run created as the runner service account",
                "pass",
                f"run {run_id} in "
                f"{compiled.tenant.spec.namespace if kfp.multi_user else 'single-user KFP'}",
            )
        )
        how = HostRun(host, smoke.PIPELINE_NAME, None, {}, timeout, poll, output == "json")
        out = sys.stderr if output == "json" else sys.stdout
        outcome = follow_run(submission, list(smoke.STEPS), how, out)
        smoke.run_report(report, outcome, timeout)
    if output == "json":
        emit_json(
            {"schema": "secureml.dev/doctor-pipeline/v1", **report.to_json(), "host": kfp.url}
        )
    else:
        print_table(
            ("status", "check", "seen", "fix"),
            ((c.status, c.title, c.seen, c.fix) for c in report.checks),
            title=report.subject,
            piped_width=PIPED_WIDTH,
        )
        counts = report.counts()
        typer.echo(f"{counts['fail']} failed, {counts['warn']} warning(s), {counts['pass']} passed")
    raise typer.Exit(report.exit_code())
