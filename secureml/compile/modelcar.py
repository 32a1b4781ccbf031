"""Importers of `oci://` models: KFP's driver would run the model image as a modelcar sidecar,
which admission refuses (`secureml.modelcar`); compile says so first, naming the task."""

from __future__ import annotations

from typing import Any

from secureml.core.violation import Violation

RULE = "model.oci-sidecar"
OCI_SCHEME = "oci://"


def oci_importer_violation(name: str, task: Any) -> Violation | None:
    """The violation of the importer task `task` (a kfp PipelineTask) when it imports a constant
    `oci://` URI, else None (a URI from a parameter is known only at run time: admission's)."""
    spec = getattr(task, "importer_spec", None)
    uri = getattr(spec, "artifact_uri", None)
    if not isinstance(uri, str) or not uri.startswith(OCI_SCHEME):
        return None
    return Violation(
        RULE,
        f"the importer imports {uri}: KFP's driver runs that model image as a modelcar sidecar "
        "(its own shell, beside the launcher, in a process namespace shared with it), which "
        "admission refuses (secureml.modelcar, docs/threat-model.md T40)",
        "import the model from the artifact store (s3://, gs://, minio://) with its model-signing "
        "signature and verify it with verify_inputs= on the step that loads it",
        task=name,
    )
