"""A pipeline's identity only on the pods its runner creates (issue 33, class 8).

A step pod's SPIFFE ID, its expected ID and the audit record's pipeline come from its labels
`secureml.dev/pipeline` and `secureml.dev/step` (the ClusterSPIFFEID's template reads them;
`secureml.launcherEnv` pins the launcher's variables to them). Every pod of a tenant may carry
any pipeline's labels, so a pod written by hand could copy another pipeline's and get its
identity. What a tenant cannot write is who sent the request: `secureml.pipelineIdentity` admits
a pod that carries a pipeline label on CREATE only from a user of the profile's
`identity.pipelineRunners` (`request.userInfo.username`: KFP's Argo workflow controller by
default); a pod a person creates gets none (and then fails `secureml.requiredLabels`: a person
creates no step pod). UPDATEs (`oldObject` set) are `secureml.platformMetadataImmutable`'s: no
`secureml.dev/` label changes. A trainer node pod is created by Kubernetes' Job controller from
the TrainJob only the tenant's runner may create (docs/trainer.md), and is exempt here.

The offline engine has no request: `created_by` binds the username a rule is judged with
(`secureml.rules.request`; without it a pod is judged as the first runner creates it).
"""

from __future__ import annotations

from secureml.core import contract
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.text import label_present, quote, string_list
from secureml.rules.launcher import TRAINER_NODE_POD
from secureml.rules.model import Rule
from secureml.rules.request import creator


def pipeline_identity_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.pipelineIdentity` of `profile` (step pods)."""
    runners = profile.spec.identity.pipeline_runners
    user = creator(runners[0])
    labelled = f"({label_present(contract.LABEL_PIPELINE)} || {label_present(contract.LABEL_STEP)})"
    expression = (
        f"oldObject == null ? (!{labelled} || {TRAINER_NODE_POD} || "
        f"({user} in {string_list(runners)})) : true"
    )
    message = (
        f"'pod carries a pipeline identity label ({contract.LABEL_PIPELINE}, "
        f"{contract.LABEL_STEP}) but was created by ' + {user} + "
        + quote(
            f": only the pipeline runner ({', '.join(runners)}, the profile's "
            "identity.pipelineRunners) creates step pods; run the pipeline through KFP, or "
            "remove the labels (a pod without them is no step of any pipeline)"
        )
    )
    return [
        tenant_rule(
            profile,
            "secureml.pipelineIdentity",
            "a pod with a pipeline's identity labels is created only by the pipeline runner "
            f"({', '.join(runners)})",
            expression,
            message,
        )
    ]
