"""A trainer node's SPIFFE ID: the step's, with `/node/<index>` (docs/trainer.md).

Every node pod of a TrainJob has the same template, so its environment and annotations name the
step's ID; SPIRE issues each node `<step's ID>/node/<completion index>` (the bundle's
ClusterSPIFFEID for trainer nodes). The launcher takes the index from the pod's own labels in the
read-only podinfo files (the Job controller sets it); without podinfo files (a local run) from
`SECUREML_TRAINER_NODE`, which admission never lets a pod set.
"""

from __future__ import annotations

from collections.abc import Mapping

from secureml.core import contract
from secureml.core.errors import SecuremlError

from .podinfo import PodInfo

MAX_INDEX_DIGITS = 4


def node_index(env: Mapping[str, str], podinfo: PodInfo) -> str | None:
    """The node's completion index, or None when the pod is not a trainer node; `SecuremlError`
    when it is one and the index is missing or not a number."""
    if podinfo.present:
        if podinfo.labels.get(contract.LABEL_TRAINER_NODE) != "true":
            return None
        index = podinfo.labels.get(contract.LABEL_JOB_COMPLETION_INDEX, "")
        where = f"{contract.PODINFO_DIR} (labels)"
    else:
        if contract.ENV_TRAINER_NODE not in env:
            return None
        index = env[contract.ENV_TRAINER_NODE]
        where = contract.ENV_TRAINER_NODE
    if not (index.isascii() and index.isdigit() and len(index) <= MAX_INDEX_DIGITS):
        raise SecuremlError(
            f"the trainer node's completion index {index!r} is not a number",
            why="a trainer node's SPIFFE ID ends in /node/<index>, the Job controller's "
            f"{contract.LABEL_JOB_COMPLETION_INDEX}",
            fix="run trainer nodes only through the TrainJob the compiler builds",
            where=where,
        )
    return str(int(index))


def node_spiffe_id(step_id: str, env: Mapping[str, str], podinfo: PodInfo) -> str:
    """The ID the launcher must see: `step_id` itself, or a trainer node's under it."""
    index = node_index(env, podinfo)
    if index is None or not step_id:
        return step_id
    return f"{step_id}{contract.SPIFFE_NODE_SEGMENT}{index}"
