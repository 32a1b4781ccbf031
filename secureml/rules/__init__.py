"""The admission rule catalogue: each rule defined once, enforced in the cluster and offline.

A `Rule` is a small value: a stable `id`, a static `message`, a CEL `expression` over `object`
(the Pod) that is true when the pod is allowed, a `message_expression` that names the offending
container, `applies_to` (`level:baseline`, `level:restricted`, `profile:<tenant>`), and `scope`:
CEL over `object` that selects the pods the rule holds for ("" = every pod; `scope.STEP_POD` =
every pod but KFP's own system pods, see `secureml.rules.scope`). The tenant bundle renders each
rule into one `validations[]` entry of the ValidatingAdmissionPolicy of its scope (`expression`,
`messageExpression`, `message`; the scope is that policy's `matchConditions` entry);
`secureml check-pod` and the compiler evaluate the same text here through the real CEL engine. The CEL is written in the subset both the API server
and the Python engine accept (docs/admission-rules.md).

Public API::

    rules_for_level(level: str, kubernetes: str = "1.36") -> list[Rule]
        The Pod Security Standards of Kubernetes `kubernetes` (1.34..1.37): "baseline" or
        "restricted" (ids `pss.*`).
    rules_for_profile(profile: TenantProfile, kubernetes: str = "1.36") -> list[Rule]
        Restricted plus secureml's rules for that tenant (ids `secureml.*`), the profile's values
        baked in as CEL literals: no policy parameters needed.
    profile_rules(profile: TenantProfile) -> list[Rule]
        Only the `secureml.*` rules of that tenant.
    evaluate(obj: dict, rules: Iterable[Rule], old_obj=None, created_by=None) -> list[Violation]
        The violations of a Pod (a dict as the API server sees it); empty means allowed. Each
        expression is compiled once per process; a rule that errors denies (fail closed); a rule
        whose scope is false for the pod is skipped (each scope evaluated once per pod).
        `old_obj`: the pod before an UPDATE; `created_by`: the requesting user (None: the
        pipeline runner, `secureml.rules.request`).
    in_scope(obj: dict, scope: str) -> bool
        Whether rules of `scope` hold for the pod (`scope.STEP_POD`, `scope.KFP_SYSTEM_POD`).
    Rule, Violation(rule, what), LEVELS

Importing this package imports the CEL engine; import it inside CLI commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from secureml.core.k8s_versions import DEFAULT_K8S_VERSION
from secureml.core.violation import Violation
from secureml.rules.engine import evaluate, in_scope
from secureml.rules.model import LEVELS, Rule
from secureml.rules.pss import rules_for_level

if TYPE_CHECKING:
    from secureml.profile.model import TenantProfile

__all__ = [
    "LEVELS",
    "Rule",
    "Violation",
    "evaluate",
    "in_scope",
    "profile_rules",
    "rules_for_level",
    "rules_for_profile",
]


def profile_rules(profile: TenantProfile) -> list[Rule]:
    """secureml's own rules for `profile` (ids `secureml.*`).

    Built once per distinct profile in a process (a compile of many pipelines, the compiler's
    preview, check-pod): the rules are a function of the profile's values alone, and the key is
    all of them (the profile's JSON).
    """
    from secureml.rules.tenant import profile_rules as build

    key = profile.model_dump_json()
    if key not in _BUILT:
        _BUILT[key] = tuple(build(profile))
    return list(_BUILT[key])


_BUILT: dict[str, tuple[Rule, ...]] = {}  # profile_rules by the profile's JSON


def rules_for_profile(profile: TenantProfile, kubernetes: str = DEFAULT_K8S_VERSION) -> list[Rule]:
    """Everything a pod of this tenant must pass on Kubernetes `kubernetes`: Pod Security
    restricted, then secureml's rules."""
    return [*rules_for_level("restricted", kubernetes), *profile_rules(profile)]
