"""One tenant rule value, built the way every `secureml.*` rule is: `object.spec` bound once."""

from __future__ import annotations

from secureml.profile.model import TenantProfile
from secureml.rules.cel.reference import spec_bound, spec_bound_message
from secureml.rules.model import Rule
from secureml.rules.scope import STEP_POD


def tenant_rule(
    profile: TenantProfile,
    rule_id: str,
    message: str,
    expression: str,
    message_expression: str,
    scope: str = STEP_POD,
) -> Rule:
    """A rule of `profile` (`applies_to` = `profile:<name>`), a step rule unless `scope` says."""
    return Rule(
        rule_id,
        message,
        spec_bound(expression),
        spec_bound_message(message_expression),
        (f"profile:{profile.metadata.name}",),
        scope,
    )
