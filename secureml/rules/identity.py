"""A pipeline's identity only on the pods its runner creates (`secureml.pipelineIdentity`)."""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC
from secureml.rules.cel.text import label_present, quote, string_list
from secureml.rules.launcher import TRAINER_NODE_POD
from secureml.rules.model import Rule
from secureml.rules.request import creator
from secureml.rules.scope import EVERY_POD, system_image

# Who creates a trainer node pod: Kubernetes' Job controller (kube-controller-manager with
# per-controller credentials, or its own identity).
JOB_CONTROLLERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:kube-controller-manager",
)


def _has_system_container() -> str:
    """CEL: a container or init container runs one of KFP's or Argo's images."""
    return (
        f"({SPEC}.containers.exists(c, {system_image()}) || "
        f"(has({SPEC}.initContainers) && {SPEC}.initContainers.exists(c, {system_image()})))"
    )


def pipeline_identity_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.pipelineIdentity` of `profile` (every pod)."""
    runners = profile.spec.identity.pipeline_runners
    user = creator(runners[0])
    by_job_controller = f"({creator(JOB_CONTROLLERS[0])} in {string_list(JOB_CONTROLLERS)})"
    labelled = f"({label_present(contract.LABEL_PIPELINE)} || {label_present(contract.LABEL_STEP)})"
    pipeline_pod = f"({labelled} || {_has_system_container()})"
    expression = (
        f"oldObject == null ? ({TRAINER_NODE_POD} ? {by_job_controller} : "
        f"(!{pipeline_pod} || ({user} in {string_list(runners)}))) : true"
    )
    node_message = (
        quote(f"a trainer node pod (label {contract.LABEL_TRAINER_NODE}) was created by ")
        + f" + {creator(JOB_CONTROLLERS[0])} + "
        + quote(
            f": only the Job controller ({', '.join(JOB_CONTROLLERS)}) creates them, from the "
            "step's TrainJob"
        )
    )
    opening = quote(
        f"pod carries a pipeline identity label ({contract.LABEL_PIPELINE}, "
        f"{contract.LABEL_STEP}) or KFP's/Argo's containers, but was created by "
    )
    message = f"{TRAINER_NODE_POD} ? {node_message} : {opening} + {user} + " + quote(
        f": only the pipeline runner ({', '.join(runners)}, the profile's "
        "identity.pipelineRunners) creates pipeline pods; run the pipeline through KFP, or "
        "remove the labels and KFP's and Argo's containers (a pod without them belongs to "
        "no pipeline)"
    )
    return [
        tenant_rule(
            profile,
            "secureml.pipelineIdentity",
            "a pod with a pipeline's identity labels or KFP's/Argo's containers is created only "
            f"by the pipeline runner ({', '.join(runners)}); a trainer node pod only by the Job "
            "controller",
            expression,
            message,
            scope=EVERY_POD,
        )
    ]
