"""A trainer node pod is what a TrainJob of the tenant makes, with a usable node index."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.text import label_is, label_present, quote
from secureml.rules.model import Rule


def _trainer_node(profile: TenantProfile) -> Rule:
    trainer = profile.spec.trainer
    index = quote(contract.LABEL_JOB_COMPLETION_INDEX)
    labels = "object.metadata.labels"
    annotations = "object.metadata.annotations"
    if trainer is None:
        ok = "false"
    else:
        ok = (
            f"{label_is(contract.LABEL_TRAINER_NODE, 'true')} && "
            f"{label_present(contract.LABEL_JOBSET_NAME)} && {index} in {labels} && "
            f"{labels}[{index}].matches('^(0|[1-9][0-9]{{0,3}})$') && "
            f"int({labels}[{index}]) < {trainer.max_nodes} && has({annotations}) && "
            f"{index} in {annotations} && {annotations}[{index}] == {labels}[{index}]"
        )
    message = (
        "a trainer node pod (label secureml.dev/trainer-node) must be one the profile allows "
        "(spec.trainer), labelled true, with one JobSet name and a completion index below "
        "spec.trainer.maxNodes, the same in its label and annotation"
    )
    return tenant_rule(
        profile,
        "secureml.trainerNode",
        message,
        f"!{label_present(contract.LABEL_TRAINER_NODE)} || ({ok})",
        quote(message),
    )


def trainer_node_rules(profile: TenantProfile) -> list[Rule]:
    return [_trainer_node(profile)]
