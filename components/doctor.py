"""The body of the `doctor_node_op` step: `secureml doctor node` inside a pipeline step.

A step on a GPU node sees the node's driver and the GPUs it was given (their NVML health, MIG
layout, the CC state) and the kernel module's /proc/driver/nvidia, but not the host's container
toolkit configuration: that check is left to the doctor DaemonSet (docs/bundle.md). KFP ships this
function's source into the pod, so it imports what it uses.
"""

from kfp import dsl


def doctor_node(
    report: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    profiles: str = "",
    node_labels: str = "",
    root: str = "/",
    fail_on_fail: bool = True,
) -> str:
    """Check the node this step runs on against the tenant profiles (YAML text, `---`-separated)
    whose pools hold it (`node_labels`: `k=v,k=v`), the kernel module's files read under `root`;
    write the report as JSON. Returns the worst
    status (pass, warn, fail); with `fail_on_fail` a failed check fails the step."""
    import json
    from pathlib import Path

    import yaml

    from secureml.doctor.node import NodeInputs, node_report, parse_labels, to_json
    from secureml.profile.model import TenantProfile

    loaded = tuple(
        TenantProfile.from_dict(document, source="profiles")
        for document in yaml.safe_load_all(profiles)
        if document
    )
    labels = parse_labels([node_labels]) if node_labels else None
    inputs = NodeInputs(root=Path(root), profiles=loaded, labels=labels, toolkit=False)
    found = node_report(inputs)
    with open(report.path, "w", encoding="utf-8") as handle:
        json.dump(to_json(found, inputs), handle, indent=2, sort_keys=True)
    for status, count in found.counts().items():
        metrics.log_metric(status, count)
    if fail_on_fail and found.worst == "fail":
        failed = [f"{c.name}: {c.seen}" for c in found.checks if c.status == "fail"]
        raise SystemExit("doctor node found failed checks:\n" + "\n".join(failed))
    return found.worst
